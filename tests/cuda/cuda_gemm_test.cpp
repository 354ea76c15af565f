// The cuBLAS GEMM wrapper (gemm_nt: row-major activations times [out, in] weights) against a
// naive fp64 reference on fresh random inputs: skinny (a denoising block) and taller shapes, bf16
// and fp32 outputs, accumulation into the output (the residual adds), and operands that are not
// 256-byte aligned.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/gemm.h"
#include "cuda_test_util.h"

namespace dllm {
namespace {

using cuda::bf16;
using test::rel_error;

struct GemmCase {
  int m, n, k;
  bool bf16_out, accumulate;
  int a_offset, w_offset;  // elements into the uploaded buffers: misaligned operands
};

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() { DLLM_CUBLAS_CHECK(cublasCreate(&h)); }
  ~Cublas() { cublasDestroy(h); }
};

void check(cublasHandle_t cublas, const GemmCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << c.m << " x " << c.n << " x " << c.k
                                  << (c.bf16_out ? " bf16" : " fp32")
                                  << (c.accumulate ? " accumulate" : "") << " offsets "
                                  << c.a_offset << "/" << c.w_offset);
  auto a = test::random_floats(static_cast<size_t>(c.a_offset + c.m * c.k), rng);
  auto w = test::random_floats(static_cast<size_t>(c.w_offset + c.n * c.k), rng, 0.05f);
  const auto a_bits = test::round_bf16(a);
  const auto w_bits = test::round_bf16(w);
  auto da = test::to_device(a_bits);
  auto dw = test::to_device(w_bits);
  const bf16* pa = reinterpret_cast<const bf16*>(da.get()) + c.a_offset;
  const bf16* pw = reinterpret_cast<const bf16*>(dw.get()) + c.w_offset;

  std::vector<float> ref(static_cast<size_t>(c.m) * c.n);
  auto init = test::random_floats(ref.size(), rng);  // what an accumulating GEMM adds to
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double s = c.accumulate ? init[static_cast<size_t>(i) * c.n + j] : 0.0;
      for (int l = 0; l < c.k; ++l)
        s += static_cast<double>(a[static_cast<size_t>(c.a_offset + i * c.k + l)]) *
             w[static_cast<size_t>(c.w_offset + j * c.k + l)];
      ref[static_cast<size_t>(i) * c.n + j] = static_cast<float>(s);
    }

  if (c.bf16_out) {
    cuda::DeviceBuffer<bf16> out(ref.size(), "out");
    cuda::gemm_nt(cublas, pa, pw, out.get(), CUDA_R_16BF, c.m, c.n, c.k, false);
    EXPECT_LT(rel_error(test::bf16_to_floats(test::to_host(out)), ref), 5e-3);
  } else {
    auto out = test::to_device(init);
    cuda::gemm_nt(cublas, pa, pw, out.get(), CUDA_R_32F, c.m, c.n, c.k, c.accumulate);
    EXPECT_LT(rel_error(test::to_host(out), ref), 1e-3);
  }
}

TEST(CudaGemm, MatchesNaiveOnSkinnyAndTallShapes) {
  std::mt19937 rng(31);
  Cublas cublas;
  const GemmCase cases[] = {
      {4, 384, 256, false, false, 0, 0},  {4, 256, 256, false, true, 0, 0},
      {32, 1536, 256, true, false, 0, 0}, {32, 256, 768, false, true, 0, 0},
      {5, 300, 136, false, true, 3, 8},   {17, 130, 72, true, false, 8, 1},
      {64, 512, 128, false, true, 0, 0},  {65, 192, 200, false, true, 0, 0},
      {300, 257, 136, true, false, 0, 4}, {1, 1000, 64, false, false, 0, 0},
  };
  for (const GemmCase& c : cases) check(cublas.h, c, rng);
}

TEST(CudaGemm, RejectsAnAccumulatingBf16Output) {
  Cublas cublas;
  cuda::DeviceBuffer<bf16> a(64, "a"), w(64, "w"), out(64, "out");
  EXPECT_THROW(cuda::gemm_nt(cublas.h, a.get(), w.get(), out.get(), CUDA_R_16BF, 1, 8, 8, true),
               Error);
}

}  // namespace
}  // namespace dllm
