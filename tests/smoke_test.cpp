#include <gtest/gtest.h>

#include "core/dtype.h"

TEST(Dtype, Bf16RoundTrip) { EXPECT_EQ(dllm::bf16_to_f32(dllm::f32_to_bf16(1.5f)), 1.5f); }
