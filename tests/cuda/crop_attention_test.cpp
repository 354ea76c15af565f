// The vision tower's batched crop attention (backend/cuda/crop_attention.h): all crops in one
// call give each crop what it gives alone, bit for bit (attention_batch's batch invariance), and
// what the single-sequence kernel gave per crop (the launch it replaces) within bf16 rounding.
#include <gtest/gtest.h>
#include <cmath>
#include <random>

#include "backend/cuda/crop_attention.h"
#include "cuda/cuda_test_util.h"

namespace dllm {
namespace {

using test::rel_error;

struct Inputs {
  cuda::DeviceBuffer<uint16_t> q, k, v;
};

Inputs random_inputs(size_t values, std::mt19937& rng) {
  Inputs in;
  for (auto* buf : {&in.q, &in.k, &in.v}) {
    std::vector<float> x = test::random_floats(values, rng);
    *buf = test::to_device(test::round_bf16(x));
  }
  return in;
}

const cuda::bf16* bf(const cuda::DeviceBuffer<uint16_t>& b, int64_t at) {
  return reinterpret_cast<const cuda::bf16*>(b.get()) + at;
}

// The encoder's former per-crop launch: attention() over the crop's rows, every key visible.
void single_sequence(const Inputs& in, int64_t at, int rows, int heads, int head_dim, float scale,
                     cuda::bf16* out) {
  std::vector<int32_t> iota(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) iota[static_cast<size_t>(i)] = i;
  auto positions = test::to_device(iota);
  auto n_keys = test::to_device(std::vector<int32_t>{rows});
  cuda::AttentionParams a;
  a.q = bf(in.q, at);
  a.k_cache = bf(in.k, at);
  a.v_cache = bf(in.v, at);
  a.n_keys = n_keys.get();
  a.slot_positions = positions.get();
  a.q_positions = positions.get();
  a.kind = cuda::MaskKind::kBidirectional;
  a.n_q = rows;
  a.max_keys = rows;
  a.heads = heads;
  a.kv_heads = heads;
  a.head_dim = head_dim;
  a.scale = scale;
  a.splits = 1;
  cuda::DeviceBuffer<float> ws;
  cuda::attention_workspace_ensure(ws, cuda::attention_workspace_floats(rows, heads, head_dim, 1),
                                   nullptr);
  cuda::attention_use_workspace(a, ws.get());
  a.out = out + at;
  cuda::attention(a, nullptr);
  DLLM_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaCropAttention, AllCropsInOneCallGiveWhatEachGivesAlone) {
  std::mt19937 rng(729);
  // SigLIP's 729 patches (not a multiple of any tile) at its padded head width, and a narrow tower.
  struct Shape {
    int crops, rows, heads, head_dim;
  };
  for (const Shape& s : {Shape{5, 729, 4, 128}, Shape{3, 50, 2, 32}}) {
    const int64_t width = int64_t(s.heads) * s.head_dim, values = int64_t(s.crops) * s.rows * width;
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    const Inputs in = random_inputs(size_t(values), rng);
    cuda::CropAttention attn(s.crops, s.rows, s.heads, s.head_dim, scale, nullptr);
    cuda::DeviceBuffer<cuda::bf16> all(size_t(values), "batched"), alone(size_t(values), "alone"),
        single(size_t(values), "single");
    attn.run(bf(in.q, 0), bf(in.k, 0), bf(in.v, 0), all.get(), s.crops, nullptr);
    for (int c = 0; c < s.crops; ++c) {
      const int64_t at = int64_t(c) * s.rows * width;
      attn.run(bf(in.q, at), bf(in.k, at), bf(in.v, at), alone.get() + at, 1, nullptr);
      single_sequence(in, at, s.rows, s.heads, s.head_dim, scale, single.get());
    }
    const auto got = test::bf16_to_floats(test::to_host(all));
    EXPECT_EQ(rel_error(got, test::bf16_to_floats(test::to_host(alone))), 0.0) << s.rows;
    EXPECT_LE(rel_error(got, test::bf16_to_floats(test::to_host(single))), 1e-2) << s.rows;
  }
}

}  // namespace
}  // namespace dllm
