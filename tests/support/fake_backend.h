// A scripted stand-in for a model: decoders are pure logic, so their rules are tested against
// TokenStats chosen by the test, and every forward they plan is recorded for inspection.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace dllm::test {

// Returns the stats of one output row. `pos` is the logical position of the token being decided
// (rng_positions when given, else the row's position); `seq` is the whole planned forward.
using ScriptFn = std::function<TokenStats(const SequenceForward& seq, int32_t pos)>;
// Returns the full logits row of output row `row` (a query index of `seq`), for want_logits.
using LogitsFn = std::function<std::vector<float>(const SequenceForward& seq, int32_t row)>;

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(ScriptFn script, LogitsFn logits = {})
      : script_(std::move(script)), logits_(std::move(logits)) {}
  std::string name() const override { return "fake"; }
  int64_t kv_bytes_per_slot() const override { return 1; }
  std::unique_ptr<MethodState> create_method_state() override {
    return std::make_unique<MethodState>();
  }
  std::vector<SequenceResult> forward(std::span<const SequenceForward> batch) override;
  void fill_cache_random(KvCache& cache, int64_t n, uint64_t) override {
    cache.reserve(n);
    for (int64_t s = 0; s < n; ++s) cache.set_position(s, static_cast<int32_t>(s));
    cache.set_length(n);
  }

  std::vector<SequenceForward> calls;  // every forward, in order

 protected:
  void allocate_kv_storage(int64_t) override {}
  void copy_kv_pages(std::span<const std::pair<int32_t, int32_t>>) override {}
  int64_t default_kv_pool_bytes() const override { return int64_t{1} << 20; }

 private:
  ScriptFn script_;
  LogitsFn logits_;
};

// Stats with p for every confidence kind, entropy/margin left at zero.
TokenStats stats(int32_t token, float p);

}  // namespace dllm::test
