#include "core/zeroed_floats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

namespace dllm {
namespace {

// Sizes below, at and across the 2 MiB pages it advises, and an odd tail.
TEST(ZeroedFloats, HoldsNZerosWhateverTheSize) {
  for (size_t n : {size_t{0}, size_t{7}, size_t{1} << 19, (size_t{3} << 20) + 5}) {
    const std::vector<float> v = zeroed_floats(n);
    ASSERT_EQ(v.size(), n);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) << n;
  }
}

}  // namespace
}  // namespace dllm
