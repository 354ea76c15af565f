// Philox4x32-10 against the Random123 known-answer vectors, and uniform() against the values
// tools/dllm_rng.py prints (the Python twin used by reference trajectories).
#include "decode/rng.h"

#include <gtest/gtest.h>

#include <set>

namespace dllm {
namespace {

TEST(Philox, KnownAnswerVectors) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformMatchesPythonTwin) {
  EXPECT_DOUBLE_EQ(uniform({0, 0, 0}, 0, RngStream::kTokenSample), 0.39904647231489565);
  EXPECT_DOUBLE_EQ(uniform({42, 0, 3}, 17, RngStream::kTokenSample), 0.23947008550408377);
  EXPECT_DOUBLE_EQ(uniform({(1ull << 40) + 5, 7, 123456}, 99, RngStream::kAccept),
                   0.01370373270140779);
  // A per-vocabulary-entry draw: the index enters the counter as stream | index << 8.
  EXPECT_DOUBLE_EQ(uniform({9, 2, 5}, 33, RngStream::kGumbel, 126347), 0.08531560780733971);
  EXPECT_EQ(uniform({9, 2, 5}, 33, RngStream::kGumbel, 0),
            uniform({9, 2, 5}, 33, RngStream::kGumbel));
}

TEST(Philox, DrawsAreDistinctAndInRange) {
  std::set<double> seen;
  for (int pos = 0; pos < 200; ++pos)
    for (uint32_t step = 0; step < 5; ++step) {
      const double u = uniform({7, 1, step}, pos, RngStream::kTokenSample);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
      seen.insert(u);
    }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace dllm
