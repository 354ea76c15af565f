#include "support/tensor_parallel_forwards.h"

#include <gtest/gtest.h>

#include <numeric>

namespace dllm::test {

SequenceForward logit_rows(const std::vector<int32_t>& ids, int32_t first_position) {
  SequenceForward f;
  f.tokens = ids;
  f.positions.resize(ids.size());
  std::iota(f.positions.begin(), f.positions.end(), first_position);
  f.rule = AttentionRule::block_causal(4);
  f.want_logits = true;
  f.output_rows.resize(ids.size());
  std::iota(f.output_rows.begin(), f.output_rows.end(), 0);
  return f;
}

std::vector<float> prefill_share_and_blocks(Backend& backend) {
  const std::vector<int32_t> prompt = {3, 99, 17, 250, 5, 8, 41, 7, 12, 290, 64, 33, 2, 81, 9, 14};
  auto a = backend.create_cache(32);
  SequenceForward fill = logit_rows(prompt, 0);
  fill.cache = a.get();
  fill.write = CacheWrite::kAppend;
  std::vector<float> out = backend.forward(std::span(&fill, 1))[0].logits;
  auto b = std::make_unique<KvCache>(backend.kv_pool());
  const int32_t page = a->pages()[0];
  backend.kv_pool().retain(page);
  b->adopt_prefix(std::span(&page, 1));
  SequenceForward rewrite = logit_rows({77}, 5);
  rewrite.cache = b.get();
  rewrite.write = CacheWrite::kAtSlots;
  rewrite.write_slots = {5};
  backend.forward(std::span(&rewrite, 1));
  EXPECT_NE(b->pages()[0], page) << "B must write its own copy";
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<SequenceForward> blocks = {logit_rows({12, 290, 290, 64}, 16),
                                           logit_rows({12, 290, 290, 64}, 16)};
    blocks[0].cache = a.get();
    blocks[1].cache = b.get();
    for (const SequenceResult& r : backend.forward(blocks))
      out.insert(out.end(), r.logits.begin(), r.logits.end());
  }
  return out;
}

}  // namespace dllm::test
