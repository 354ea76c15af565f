// Forwards the tensor-parallel tests run on a whole model and on a group alike (CPU in
// tests/backend and tests/model, CUDA in tests/cuda), returning every logit they produce.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace dllm::test {

// `ids` at positions first_position.., block-causal (block 4), every row's logits wanted.
SequenceForward logit_rows(const std::vector<int32_t>& ids, int32_t first_position);

// A prompt appended to sequence A; sequence B maps A's page and rewrites one of its slots
// (write-at-slots: a copy-on-write page copy, which every rank of a group must make in its own
// storage); then the same block over both caches three times (a CUDA backend runs it directly,
// captures a graph, replays it). Token ids stay below 300 (the smallest fixture vocabulary).
std::vector<float> prefill_share_and_blocks(Backend& backend);

}  // namespace dllm::test
