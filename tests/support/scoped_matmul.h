// Sets the CPU forward's matmul precision (and the AMX threshold) for a scope and puts back what
// was there: the tests that compare the paths leave the process as they found it.
#pragma once

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/matmul_precision.h"

namespace dllm::test {

class ScopedMatmul {
 public:
  explicit ScopedMatmul(cpu::MatmulPrecision precision,
                        cpu::AmxThreshold threshold = cpu::AmxThreshold{})
      : precision_(cpu::matmul_precision()), threshold_(cpu::amx_threshold()) {
    cpu::set_matmul_precision(precision);
    cpu::set_amx_threshold(threshold);
  }
  ~ScopedMatmul() {
    cpu::set_matmul_precision(precision_);
    cpu::set_amx_threshold(threshold_);
  }
  ScopedMatmul(const ScopedMatmul&) = delete;
  ScopedMatmul& operator=(const ScopedMatmul&) = delete;

 private:
  cpu::MatmulPrecision precision_;
  cpu::AmxThreshold threshold_;
};

// Every bf16 weight matrix on the tiles, however small (the tiny fixtures are below the default).
inline constexpr cpu::AmxThreshold kAmxForAll{0, 0};

}  // namespace dllm::test
