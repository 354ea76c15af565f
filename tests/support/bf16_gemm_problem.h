// A random product for the tests of the GEMMs over bf16 weights (gemm_bf16_test, gemm_amx_test):
// fp32 activations and bf16 weights from a normal distribution, and the scalar bf16 conversions
// their references use.
#pragma once

#include <bit>
#include <cmath>
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

// Row i of a times weight row j in double precision, and the sum of the products' magnitudes
// (which bounds an fp32 sum's rounding); `activation` maps each activation first (the identity, or
// the bf16 rounding of a bf16-product kernel).
struct DoubleProduct {
  double value = 0, magnitude = 0;
};
template <class Activation>
DoubleProduct double_product(const Bf16GemmProblem& p, int64_t i, int64_t j,
                             Activation activation) {
  DoubleProduct d;
  for (int64_t t = 0; t < p.k; ++t) {
    const double prod = double(activation(p.a[static_cast<size_t>(i * p.k + t)])) *
                        widen(p.w[static_cast<size_t>(j * p.k + t)]);
    d.value += prod;
    d.magnitude += std::fabs(prod);
  }
  return d;
}

}  // namespace dllm::test
