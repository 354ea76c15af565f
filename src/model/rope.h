// RoPE frequencies of a checkpoint, with the scaling its config asks for, computed as Hugging
// Face transformers' modeling_rope_utils does (fp32 frequencies), for the CPU and CUDA tables:
//   default  inv_freq_i = 1 / theta^(2i / d)
//   linear   inv_freq / factor
//   dynamic  NTK-aware: theta' = theta * (factor * L / M - (factor - 1))^(d / (d - 2)). HF
//            re-evaluates it per forward at L = the longest position so far (keys cached
//            earlier keep their old rotation); we evaluate it once at L = factor * M, the context
//            the scaling targets, as vLLM does, so a sequence's keys never change meaning.
//   yarn     per-dimension blend of interpolated (/ factor) and extrapolated frequencies over
//            the correction range of beta_fast / beta_slow rotations in the original context,
//            and an attention factor (0.1 ln(factor) + 1, or from mscale / mscale_all_dim)
//            that multiplies cos and sin. factor defaults to M / original M when not given
//            (transformers 5).
// M is max_position_embeddings, d the rotary dims. Checked against the independent reference
// tools/reference_rope_scaling.py in tests/model/rope_scaling_test.cpp.
#pragma once

#include <vector>

#include "model/model_config.h"

namespace dllm {

struct RopeTable {
  std::vector<float> inv_freq;    // [rotary_dim / 2]
  float attention_factor = 1.0f;  // cos and sin are multiplied by it
};

RopeTable rope_table(const ModelConfig& config);

}  // namespace dllm
