#include "engine/request_params.h"

#include <cmath>

#include "core/error.h"
#include "decode/decode_options.h"

namespace dllm {

namespace {

// Sampling knobs given as typed fields.
void apply_sampling(const Request& r, const ModelConfig& c, SamplerConfig& s) {
  if (r.temperature) {
    const float t = *r.temperature;
    if (!std::isfinite(t) || t < 0) fail("--temperature must be >= 0 (got ", t, ")");
    // Below this, logits / T overflow to inf and every probability is NaN.
    if (t > 0 && t < 1e-5f)
      fail("--temperature must be 0 (greedy) or at least 1e-05 (got ", t, ")");
    if (t > 1e4f) fail("--temperature must be at most 10000 (got ", t, ")");
    s.temperature = t;
  }
  if (r.top_k) {
    if (*r.top_k < 0 || *r.top_k > c.vocab_size)
      fail("--top-k must be in [0, ", c.vocab_size, "] (0: off; got ", *r.top_k, ")");
    s.top_k = *r.top_k;
  }
  s.top_p = -1.0f;  // unset: the family's default
  if (r.top_p) {
    const float p = *r.top_p;
    if (!(p > 0.0f) || p > 1.0f) fail("--top-p must be in (0, 1] (got ", p, ")");
    s.top_p = p;
  }
}

}  // namespace

ResolvedRequest resolve_request(const Request& r, const Model& model, const TextCodec& text,
                                uint64_t id, bool on_gpu) {
  const ModelConfig& c = model.config();
  ResolvedRequest out;
  out.prompt = text.prompt_ids(r);
  DecodeParams p;
  p.strategy = r.strategy;
  if (r.max_tokens) {
    if (*r.max_tokens <= 0) fail("--max-tokens must be positive (got ", *r.max_tokens, ")");
    p.max_tokens = *r.max_tokens;
  }
  apply_sampling(r, c, p.sampler);
  apply_decode_options(p, r.options);
  p.pad_window = on_gpu;
  if (auto it = r.options.find("pad-window"); it != r.options.end())
    p.pad_window = it->second == "true" || it->second == "1";
  if (auto it = r.options.find("pad_window"); it != r.options.end())
    p.pad_window = it->second == "true" || it->second == "1";
  // A seed makes repeated requests repeat (OpenAI's seed); without one each request draws from
  // its own stream. Never from its batch slot.
  p.seed = r.seed.value_or(0);
  p.sequence_id = r.seed ? 0 : static_cast<uint32_t>(id);
  out.params = resolve_decode_params(c, p, static_cast<int64_t>(out.prompt.size()));

  if (!r.stop.empty() && !text.tokenizer())
    fail("stop strings need the checkpoint's tokenizer.json");
  for (const std::string& s : r.stop)
    if (s.empty()) fail("stop strings must not be empty");
  if (!r.ignore_eos) out.stop_ids = text.stop_ids();
  for (int32_t t : r.stop_token_ids) {
    if (t < 0 || t >= c.vocab_size)
      fail("stop token id ", t, " is outside the vocabulary (size ", c.vocab_size, ")");
    out.stop_ids.push_back(t);
  }
  return out;
}

}  // namespace dllm
