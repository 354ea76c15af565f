// Counter-based random numbers (Philox4x32-10): a draw depends only on (seed, sequence, step,
// position, stream), never on batch composition or call order — the same request gives the same
// tokens alone or batched, on CPU or GPU, and a reference implementation given the same key
// reproduces our trajectory exactly (tools/dllm_rng.py is the Python twin).
#pragma once

#include <array>
#include <cstdint>

namespace dllm {

enum class RngStream : uint32_t {
  kTokenSample = 0,  // sampling a token from a filtered distribution
  kAccept = 1,       // S2D2 accept/reject draws
  kRemask = 2,       // remasking / transfer decisions (LLaDA 'random', Dream 'origin', alg_temp)
  kGumbel = 3,       // one draw per vocabulary entry: LLaDA's Gumbel-max sampling
};

struct RngKey {
  uint64_t seed = 0;
  uint32_t sequence = 0;  // request-derived id, not a batch slot
  uint32_t step = 0;      // decoder step (forward index within the request)
};

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A uniform double in [0, 1) with 53 random bits for (key, position, stream, index).
// The Philox counter is {position, key.step, key.sequence, stream | index << 8} and the Philox
// key is the 64-bit seed; `index` numbers several draws of one (position, stream) — the
// vocabulary entry for kGumbel — and is 0 (the counter is then just the stream) everywhere else.
// Indices must be below 2^24.
double uniform(const RngKey& key, int32_t position, RngStream stream, uint32_t index = 0);

}  // namespace dllm
