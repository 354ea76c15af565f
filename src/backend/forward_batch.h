// The forward contract (DESIGN.md): what one sequence asks of one model forward, and what it gets
// back. A decoder fills SequenceForward; a backend runs a batch of them in one forward.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attention/attention_rule.h"
#include "kv/kv_cache.h"

namespace dllm {

enum class CacheWrite {
  kNone,     // fresh K/V are used by this forward only (denoising step); the cache is unchanged
  kAppend,   // fresh K/V are committed after the cache's committed slots (prefill, block commit)
  kAtSlots,  // fresh K/V overwrite the given slots (d2Cache refresh, WeDLM window)
};

struct SequenceForward {
  // The sequence's cache; null means no cache at all (full recompute, nothing visible but the
  // queries themselves, and write must be kNone).
  KvCache* cache = nullptr;

  std::vector<int32_t> tokens;     // query tokens, in physical order
  std::vector<int32_t> positions;  // their logical RoPE positions (same length)
  AttentionRule rule;

  // Cache entries the queries see: a slot list, or by default the committed range [0, length).
  std::optional<std::vector<int32_t>> visible_slots;

  CacheWrite write = CacheWrite::kNone;
  std::vector<int32_t> write_slots;  // kAtSlots: one slot per query

  std::vector<int32_t> output_rows;  // query rows whose outputs are wanted, in the order returned
  bool want_logits = true;           // full-vocabulary logits for output_rows (tests, parity)
};

struct SequenceResult {
  std::vector<float> logits;  // [output_rows.size(), vocab] when want_logits
};

}  // namespace dllm
