// A random product for the tests of the GEMMs over bf16 weights (gemm_bf16_test, gemm_amx_test):
// fp32 activations and bf16 weights from a normal distribution, and the scalar bf16 conversions
// their references use.
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace dllm::test {

// bf16 bits of a finite float, round to nearest even (the scalar definition).
inline uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline double widen(uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
}

struct Bf16GemmProblem {
  int64_t m, n, k;
  std::vector<float> a;     // [m, k]
  std::vector<uint16_t> w;  // [n, k], bf16 bits
};

inline Bf16GemmProblem random_problem(int64_t m, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Bf16GemmProblem p{m, n, k, std::vector<float>(static_cast<size_t>(m * k)),
                    std::vector<uint16_t>(static_cast<size_t>(n * k))};
  for (float& v : p.a) v = d(rng);
  for (uint16_t& v : p.w) v = to_bf16(d(rng));
  return p;
}

}  // namespace dllm::test
