// Sequence: one request inside the engine core — what it asked for, the decoder that plans its
// forwards (how it runs), its memory (KV cache pages, method state) and what it has streamed.
// The scheduler moves it between waiting and running; preemption drops its decoder and memory
// (recompute: the counter-based RNG and batch-invariant forwards make the second run repeat the
// first, and tokens already streamed are not streamed again).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention/sparse_prefill_config.h"
#include "backend/backend.h"
#include "engine/generation.h"
#include "vision/modality.h"

namespace dllm {

struct SequenceCallbacks {
  TokenCallback on_tokens;  // new final tokens
  TraceCallback on_trace;   // after every forward
  StopRule stop_rule;       // stop strings
  FinishCallback on_finish;
};

struct SequenceRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  // Vision-language prompts: the features that replace the placeholders' embeddings (every
  // forward of the sequence carries them) and the modality of each prompt token.
  std::shared_ptr<const InputEmbeddings> input_embeddings;
  std::vector<Modality> modality;
  // MMInference sparse prefill (EngineConfig::sparse_prefill), attached to the sequence's causal
  // and block-causal forwards; the backend applies it to the cold prefill only.
  std::shared_ptr<const SparsePrefillRequest> sparse_prefill;
  DecodeParams params;  // resolved; params.sequence_id keys the RNG
  std::vector<int64_t> stop_ids;
  SequenceCallbacks callbacks;
  // Every forward also reports its MoE routing (SequenceForward::want_routing) to on_trace:
  // tests that show where two runs parted. A traced forward of an MoE model then runs eagerly
  // on the GPU.
  bool trace_routing = false;
};

enum class SequenceStatus { kWaiting, kRunning, kFinished };

class Sequence {
 public:
  using Clock = std::chrono::steady_clock;
  Sequence(SequenceRequest request, uint64_t arrival_order);

  uint64_t id() const { return request_.id; }
  const SequenceRequest& request() const { return request_; }
  uint64_t arrival_order() const { return arrival_order_; }
  SequenceStatus status = SequenceStatus::kWaiting;

  // Creates the decoder and memory on admission (after a preemption, anew).
  void start(const ModelConfig& config, Backend& backend);
  // Drops the decoder and memory; streamed output is kept. `preempted`: counted as a preemption
  // (false when an admission is rolled back before it ran).
  void reset(bool preempted);
  bool started() const { return decoder_ != nullptr; }
  Decoder& decoder() { return *decoder_; }
  KvCache* cache() { return cache_.get(); }

  // This step's forwards (empty when the decoder is done), with scratch caches for the
  // forwards the decoder planned without one. False when the decoder has nothing left.
  bool plan(Backend& backend);
  std::vector<SequenceForward>& forwards() { return forwards_; }
  // Pages the planned forwards still need from the pool; Error when a forward is invalid.
  int64_t pages_needed() const;
  // Reserves those pages (after pages_needed() was found available).
  void reserve_pages();

  // Feeds the step's results to the decoder, applies stop ids, stop rules and max_tokens, and
  // streams new final tokens. True when the sequence has finished.
  bool observe(std::span<const SequenceResult> results);
  // Ends the sequence: frees its memory and reports the result (finish_reason, error).
  void finish(const std::string& reason, const std::string& error = {});

  // Query rows of the planned forwards.
  int64_t planned_rows() const;
  // Prefix sharing (engine/prefix_sharing.h): reuses published pages for this step's prefill and
  // remembers what to publish once it has committed.
  void share_prefix();
  void publish_prefix();

  int64_t prefix_cached_tokens = 0;
  GenerationResult& result() { return result_; }

 private:
  // An error when a result carries non-finite logits or statistics (broken weights): a NaN
  // confidence never passes a threshold, so decoding would emit garbage or never end.
  std::optional<std::string> non_finite_output(std::span<const SequenceResult> results) const;
  // Forwards a decoder may take at most: 4 x (prompt + max_tokens) + 64. Every decoder commits at
  // least one token per step, so only one that makes no progress reaches it.
  int64_t forward_cap() const;
  bool stop_with_error(const std::string& error);  // marks the result; true (finished)

  SequenceRequest request_;
  uint64_t arrival_order_;
  const ModelConfig* config_ = nullptr;
  Clock::time_point arrival_ = Clock::now();
  bool admitted_once_ = false;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<MethodState> state_;
  std::vector<SequenceForward> forwards_;
  std::vector<std::unique_ptr<KvCache>> scratch_;
  std::vector<int32_t> prefill_tokens_;  // a shareable prefill to publish after it ran
  AttentionRule prefill_rule_;
  int64_t forwards_before_ = 0;  // decoder forwards of runs dropped by preemption
  size_t emitted_ = 0;           // final tokens streamed so far
  GenerationResult result_;
};

}  // namespace dllm
