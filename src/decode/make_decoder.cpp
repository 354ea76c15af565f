// Strategy x family: which decoder runs, with which defaults (model-specs per family).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "decode/ar_decoder.h"
#include "decode/block_diffusion_decoder.h"
#include "decode/decoder.h"
#include "decode/fast_dllm_v2_decoder.h"
#include "decode/full_diffusion_decoder.h"
#include "decode/s2d2_decoder.h"

namespace dllm {

namespace {

std::string default_strategy(const ModelConfig& c) {
  if (c.family == "sdar" || c.family == "fast_dllm_v2") return "block";
  if (c.family == "wedlm") return "ar";  // streaming decoding (--strategy wedlm) is a later issue
  return "full";
}

std::vector<std::string> strategies_for(const ModelConfig& c) {
  if (c.family == "sdar" || c.family == "fast_dllm_v2") return {"block", "ar", "s2d2"};
  if (c.family == "wedlm") return {"ar"};
  if (c.family == "llada" || c.family == "dream") return {"full"};
  return {};
}

void add_unique(std::vector<int32_t>& ids, int32_t id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

// Knobs of one family given to another: refused with the name of the knob.
void refuse_llada_knobs(const DecodeParams& p, const std::string& who) {
  if (p.cfg_scale != 0.0f) fail("--cfg-scale applies to LLaDA full diffusion only, not ", who);
  if (p.logits_eos_inf) fail("--logits-eos-inf applies to LLaDA full diffusion only, not ", who);
  if (p.confidence_eos_eot_inf)
    fail("--confidence-eos-eot-inf applies to LLaDA full diffusion only, not ", who);
}

void refuse_dream_knobs(const DecodeParams& p, const std::string& who) {
  if (!p.alg.empty()) fail("--alg applies to Dream full diffusion only, not ", who);
  if (p.alg_temp != 0.0f) fail("--alg-temp applies to Dream full diffusion only, not ", who);
}

// LLaDA generate.py (model-specs §4.5). Defaults: its demo, gen 128 / block 32 / steps = gen.
void resolve_llada_full(const ModelConfig& c, DecodeParams& p) {
  refuse_dream_knobs(p, "LLaDA");
  if (p.block_length == 0) p.block_length = std::min<int32_t>(32, p.max_tokens);
  if (p.block_length < 0) fail("--block-length must be positive (got ", p.block_length, ")");
  if (p.max_tokens % p.block_length != 0)
    fail("--block-length ", p.block_length, " must divide --max-tokens ", p.max_tokens,
         " (LLaDA decodes whole blocks of the generation length)");
  const int32_t blocks = p.max_tokens / p.block_length;
  if (p.steps == 0) p.steps = p.max_tokens;
  if (p.steps < 0) fail("--steps must be positive (got ", p.steps, ")");
  if (p.steps > p.max_tokens)
    fail("--steps ", p.steps, " exceeds --max-tokens ", p.max_tokens,
         " (at most one step per token)");
  if (p.steps % blocks != 0)
    fail("--steps ", p.steps, " must be a multiple of the number of blocks ", blocks,
         " (--max-tokens ", p.max_tokens, " / --block-length ", p.block_length, ")");
  if (p.remasking.empty()) p.remasking = "low_confidence";
  if (p.remasking != "low_confidence" && p.remasking != "random")
    fail("--remasking '", p.remasking, "' (LLaDA: low_confidence or random)");
  if (!std::isfinite(p.cfg_scale) || p.cfg_scale < 0)
    fail("--cfg-scale must be >= 0 (got ", p.cfg_scale, ")");
  if (p.threshold >= 0) fail("--threshold does not apply to LLaDA full diffusion");
  if (p.sub_block_length != 0) fail("--sub-block-length does not apply to LLaDA");
  if (p.sampler.top_k != 0 || (p.sampler.top_p >= 0 && p.sampler.top_p < 1.0f))
    fail(
        "--top-k and --top-p do not apply to LLaDA (Gumbel-max sampling from the full "
        "distribution)");
  p.sampler.method = SampleMethod::kGumbelMax;
  const auto eos = static_cast<int32_t>(c.eos_token_id);
  if ((p.logits_eos_inf || p.confidence_eos_eot_inf) && eos < 0)
    fail("--logits-eos-inf / --confidence-eos-eot-inf need the checkpoint's eos_token_id");
  if (p.logits_eos_inf) add_unique(p.sampler.banned_tokens, eos);
  if (p.confidence_eos_eot_inf) {
    if (c.eot_token_id < 0)
      fail(
          "--confidence-eos-eot-inf needs the end-of-turn token id (eot_token_id in "
          "config.json)");
    // generate.py: `logits_with_noise[..., EOS] = logits[..., EoT] = -inf` after x0 is chosen.
    // At temperature 0 logits_with_noise *is* logits, so both columns leave the confidence
    // softmax; with Gumbel noise only EoT does.
    if (p.sampler.greedy()) add_unique(p.sampler.confidence_banned_tokens, eos);
    add_unique(p.sampler.confidence_banned_tokens, static_cast<int32_t>(c.eot_token_id));
  }
}

// Dream diffusion_generate (model-specs §5.3). Defaults: steps = max_tokens, alg entropy (the
// README demo's choice), Dream's filter order temperature -> top-p -> top-k.
void resolve_dream_full(DecodeParams& p) {
  refuse_llada_knobs(p, "Dream");
  if (p.block_length != 0) fail("--block-length does not apply to Dream full diffusion");
  if (p.sub_block_length != 0) fail("--sub-block-length does not apply to Dream");
  if (!p.remasking.empty()) fail("--remasking does not apply to Dream (use --alg)");
  if (p.threshold >= 0) fail("--threshold does not apply to Dream full diffusion");
  if (p.steps == 0) p.steps = p.max_tokens;
  if (p.steps < 0) fail("--steps must be positive (got ", p.steps, ")");
  if (p.alg.empty()) p.alg = "entropy";
  if (p.alg != "origin" && p.alg != "maskgit_plus" && p.alg != "topk_margin" && p.alg != "entropy")
    fail("--alg '", p.alg, "' (expected origin, maskgit_plus, topk_margin or entropy)");
  if (!std::isfinite(p.alg_temp) || p.alg_temp < 0)
    fail("--alg-temp must be >= 0 (got ", p.alg_temp, ")");
  if (p.alg == "origin" && p.alg_temp > 0)
    fail("--alg-temp does not apply to --alg origin (it transfers each mask independently)");
}

}  // namespace

DecodeParams resolve_decode_params(const ModelConfig& c, DecodeParams p, int64_t prompt_tokens) {
  if (p.strategy.empty()) p.strategy = default_strategy(c);
  const auto allowed = strategies_for(c);
  if (std::find(allowed.begin(), allowed.end(), p.strategy) == allowed.end()) {
    std::string list;
    for (const auto& s : allowed) list += (list.empty() ? "" : ", ") + s;
    fail("--strategy '", p.strategy, "' is not available for ", c.family, " checkpoints",
         list.empty() ? std::string(" (no decoder for this family yet)")
                      : " (available: " + list + ")");
  }
  if (prompt_tokens <= 0) fail("the prompt is empty");
  if (p.max_tokens == DecodeParams::kFamilyDefault)
    p.max_tokens = p.strategy == "full" && c.family == "llada" ? 128 : 256;
  if (p.max_tokens <= 0) fail("--max-tokens must be positive (got ", p.max_tokens, ")");
  if (p.strategy != "full") {
    refuse_llada_knobs(p, "--strategy " + p.strategy);
    refuse_dream_knobs(p, "--strategy " + p.strategy);
  }
  if (c.mask_token_id < 0 && !(p.strategy == "ar" && c.shifted_logits))
    fail("the checkpoint has no mask token id (set mask_token_id in config.json)");

  if (p.strategy == "s2d2") {
    p.s2d2.validate();
    if (c.family == "fast_dllm_v2" && (p.s2d2.cache_ver || p.s2d2.draft_ver))
      fail("--cache-ver / --draft-ver apply to position-aligned models (SDAR) only, not ", c.family,
           " (method-specs §5.4)");
  }
  if (p.strategy == "block" || p.strategy == "s2d2") {
    if (p.block_length == 0) p.block_length = static_cast<int32_t>(c.block_size);
    if (p.block_length <= 0) fail("--block-length must be positive (got ", p.block_length, ")");
    if (c.family == "fast_dllm_v2") {
      if (p.sub_block_length == 0) p.sub_block_length = std::min<int32_t>(8, p.block_length);
      if (p.sub_block_length <= 0 || p.block_length % p.sub_block_length != 0)
        fail("--sub-block-length ", p.sub_block_length,
             " must be positive and divide the block length ", p.block_length);
      if (p.steps != 0)
        fail("--steps does not apply to Fast-dLLM v2 (it decodes each sub-block until done)");
      if (p.threshold < 0) p.threshold = 0.9f;  // run_chatbot.py
      if (p.sampler.top_p < 0) p.sampler.top_p = 0.95f;
    } else {
      if (p.steps == 0) p.steps = p.block_length;
      if (p.steps < 0) fail("--steps must be positive (got ", p.steps, ")");
      if (p.steps > p.block_length)
        fail("--steps ", p.steps, " exceeds the block length ", p.block_length,
             " (at most one step per token)");
      if (p.remasking.empty()) p.remasking = "low_confidence_dynamic";
      if (p.remasking != "low_confidence_dynamic" && p.remasking != "low_confidence_static" &&
          p.remasking != "sequential")
        fail("--remasking '", p.remasking,
             "' (expected low_confidence_dynamic, low_confidence_static or sequential)");
      // SDAR README recommendation; S2D2 runs SDAR with 0.85 (method-specs §5.1)
      if (p.threshold < 0) p.threshold = p.strategy == "s2d2" ? 0.85f : 0.9f;
    }
  } else if (p.strategy == "full") {
    if (c.family == "llada") {
      resolve_llada_full(c, p);
    } else {
      resolve_dream_full(p);
    }
  } else {
    if (p.block_length != 0 && p.block_length != 1)
      fail("--block-length does not apply to --strategy ar");
    p.block_length = 1;
    if (p.threshold < 0) p.threshold = 0.0f;
  }
  if (p.sampler.top_p < 0) p.sampler.top_p = 1.0f;
  if (std::isnan(p.threshold) || p.threshold > 1.0f)
    fail("--threshold must be in [0, 1] (got ", p.threshold, ")");
  p.sampler.order = p.strategy == "full" && c.family == "dream" ? FilterOrder::kTemperatureTopPTopK
                                                                : FilterOrder::kTemperatureTopKTopP;
  // A decoder never decides a [MASK]: untrained (or tiny) models can put mass on it.
  if (c.mask_token_id >= 0)
    add_unique(p.sampler.banned_tokens, static_cast<int32_t>(c.mask_token_id));
  p.sampler.validate();
  // Block decoders may run past max_tokens up to the end of a block; full diffusion never does.
  const int64_t overhang = p.strategy == "full" ? 0 : p.block_length;
  if (c.max_position_embeddings > 0 &&
      prompt_tokens + p.max_tokens + overhang > c.max_position_embeddings)
    fail("prompt (", prompt_tokens, " tokens) + --max-tokens ", p.max_tokens,
         " exceeds the model's context of ", c.max_position_embeddings, " positions");
  return p;
}

std::unique_ptr<Decoder> make_decoder(const ModelConfig& c, const DecodeParams& p,
                                      const std::vector<int32_t>& prompt) {
  for (int32_t id : prompt)
    if (id < 0 || id >= c.vocab_size)
      fail("prompt token id ", id, " is outside the vocabulary (size ", c.vocab_size, ")");
  if (p.strategy == "ar") return std::make_unique<ArDecoder>(c, p, prompt);
  if (p.strategy == "full") {
    for (int32_t id : prompt)
      if (id == c.mask_token_id)
        fail("the prompt contains the mask token id ", id,
             " (full diffusion would decode it as a generated position)");
    if (c.family == "llada") return std::make_unique<LladaDecoder>(c, p, prompt);
    return std::make_unique<DreamDecoder>(c, p, prompt);
  }
  if (p.strategy == "s2d2") return std::make_unique<S2d2Decoder>(c, p, prompt);
  if (c.family == "fast_dllm_v2") return std::make_unique<FastDllmV2Decoder>(c, p, prompt);
  return std::make_unique<BlockDiffusionDecoder>(c, p, prompt);
}

}  // namespace dllm
