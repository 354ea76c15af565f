// Unmasking rules shared by the block decoders (SDAR generate.py / LLaDA style).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dllm {

// The canvas of a decoder whose blocks of `block_length` align to absolute positions
// (model-specs §1.5): the prompt, then [MASK] up to the block boundary at or after
// prompt + max_tokens (the prompt's last partial block is decoded with the first new tokens).
std::vector<int32_t> aligned_block_canvas(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                          int32_t block_length, int32_t mask_id);
// Whether block `block` of such a canvas still holds a [MASK].
bool aligned_block_has_mask(const std::vector<int32_t>& canvas, int32_t block, int32_t block_length,
                            int32_t mask_id);

// Tokens to unmask at each of `steps` steps of a block of `block_length`: block/steps each, the
// first block%steps steps one more (SDAR get_num_transfer_tokens, LLaDA's schedule).
std::vector<int32_t> transfer_schedule(int32_t block_length, int32_t steps);

// Positions (indices into `confidence`) to unmask. `masked[i]` says whether position i is still a
// mask; confidence of non-masks is ignored. `k` is this step's count (clamped to the masks left —
// the reference's torch.topk would otherwise pick non-mask positions and overwrite them).
//   low_confidence_static:  the k most confident masks
//   low_confidence_dynamic: every mask with confidence > threshold if there are at least k of
//                           them, else the k most confident
//   sequential:             the k masks starting at the first one
// Ties break toward the lower position.
std::vector<int32_t> select_unmask(const std::string& rule, const std::vector<float>& confidence,
                                   const std::vector<bool>& masked, int32_t k, float threshold);

}  // namespace dllm
