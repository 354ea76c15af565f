#include "decode/rng.h"

namespace dllm {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

double uniform(const RngKey& key, int32_t position, RngStream stream, uint32_t index) {
  const auto r =
      philox4x32({static_cast<uint32_t>(position), key.step, key.sequence,
                  static_cast<uint32_t>(stream) | (index << 8)},
                 {static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)});
  // 27 + 26 bits -> [0, 1) with 53 bits, as numpy's random_sample builds doubles.
  return ((r[0] >> 5) * 67108864.0 + (r[1] >> 6)) * (1.0 / 9007199254740992.0);
}

}  // namespace dllm
