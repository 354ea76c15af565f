// Strategy x family: which decoder runs, with which defaults (model-specs per family).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "decode/ar_decoder.h"
#include "decode/block_diffusion_decoder.h"
#include "decode/d2cache_decoder.h"
#include "decode/decoder.h"
#include "decode/dllm_cache_decoder.h"
#include "decode/fast_dllm_v1_decoder.h"
#include "decode/fast_dllm_v2_decoder.h"
#include "decode/full_diffusion_decoder.h"
#include "decode/s2d2_decoder.h"
#include "decode/s2d2_edit_decoder.h"
#include "decode/token_editing_decoder.h"
#include "decode/wedlm_decoder.h"

namespace dllm {

namespace {

std::string default_strategy(const ModelConfig& c) {
  if (c.family == "sdar" || c.family == "fast_dllm_v2" || c.family == "llada2_moe") return "block";
  if (c.family == "wedlm") return "wedlm";
  return "full";
}

std::vector<std::string> strategies_for(const ModelConfig& c) {
  if (c.family == "sdar" || c.family == "fast_dllm_v2") return {"block", "ar", "s2d2"};
  if (c.family == "wedlm") return {"wedlm", "ar"};
  if (c.family == "llada2_moe") return {"block", "edit", "s2d2"};
  if (c.family == "llada" || c.family == "dream")
    return {"full", "d2cache", "fastdllm", "dllmcache"};
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

// d2Cache (method-specs §4.1): NAR by default (block = max_tokens), one token per step, greedy.
void resolve_d2cache(DecodeParams& p) {
  refuse_llada_knobs(p, "--strategy d2cache");
  refuse_dream_knobs(p, "--strategy d2cache");
  if (!p.remasking.empty()) fail("--remasking does not apply to --strategy d2cache");
  if (p.sub_block_length != 0) fail("--sub-block-length does not apply to --strategy d2cache");
  if (p.block_length == 0) p.block_length = p.max_tokens;
  if (p.block_length < 0) fail("--block-length must be positive (got ", p.block_length, ")");
  if (p.max_tokens % p.block_length != 0)
    fail("--block-length ", p.block_length, " must divide --max-tokens ", p.max_tokens);
  const int32_t blocks = p.max_tokens / p.block_length;
  if (p.steps == 0) p.steps = p.max_tokens;
  if (p.steps < 0) fail("--steps must be positive (got ", p.steps, ")");
  if (p.steps % blocks != 0 || p.steps / blocks > p.block_length)
    fail("--steps ", p.steps, " must be a multiple of the number of blocks ", blocks,
         " with at most --block-length ", p.block_length, " steps per block");
  if (!p.sampler.greedy() || p.sampler.top_k != 0 || (p.sampler.top_p >= 0 && p.sampler.top_p < 1))
    fail("--strategy d2cache decodes greedily (--temperature 0, no --top-k / --top-p)");
  if (p.d2c_k <= 0) fail("--d2c-k must be positive (got ", p.d2c_k, ")");
  if (!std::isfinite(p.d2c_sigma) || p.d2c_sigma < 0)
    fail("--d2c-sigma must be >= 0 (got ", p.d2c_sigma, ")");
  if (!(p.d2c_p >= 0.0f && p.d2c_p <= 1.0f)) fail("--d2c-p must be in [0, 1] (got ", p.d2c_p, ")");
  if (p.d2c_inflate < 0) fail("--d2c-inflate must be >= 0 (got ", p.d2c_inflate, ")");
}

// Fast-dLLM v1 (method-specs §6.4): blocks of 32, threshold 0.9, dual cache, greedy.
void resolve_fastdllm_v1(DecodeParams& p) {
  refuse_llada_knobs(p, "--strategy fastdllm");
  refuse_dream_knobs(p, "--strategy fastdllm");
  if (!p.remasking.empty()) fail("--remasking does not apply to --strategy fastdllm");
  if (p.sub_block_length != 0) fail("--sub-block-length does not apply to --strategy fastdllm");
  if (p.cache.empty()) p.cache = "dual";
  if (p.cache != "dual" && p.cache != "prefix")
    fail("--cache '", p.cache, "' (expected prefix or dual)");
  if (p.block_length == 0) p.block_length = std::min<int32_t>(32, p.max_tokens);
  if (p.block_length < 0) fail("--block-length must be positive (got ", p.block_length, ")");
  if (p.max_tokens % p.block_length != 0)
    fail("--block-length ", p.block_length, " must divide --max-tokens ", p.max_tokens);
  if (p.steps != 0)
    fail(
        "--steps does not apply to --strategy fastdllm (threshold decoding runs each block "
        "until it has no masks)");
  if (p.threshold < 0) p.threshold = 0.9f;
  if (!p.sampler.greedy() || p.sampler.top_k != 0 || (p.sampler.top_p >= 0 && p.sampler.top_p < 1))
    fail("--strategy fastdllm decodes greedily (--temperature 0, no --top-k / --top-p)");
}

// dLLM-Cache (method-specs §6.3) over vanilla decoding: blocks of 32, one token per step.
// Sparse attention (method-specs §1, §6.1, §6.2): block diffusion's cached prefix only.
// LLaDA2.x (block diffusion, like SDAR: position-aligned, prefix KV, one commit per block) takes
// them through the same decoders and the same forward; its partial RoPE and fused QKV happen
// before the attention sees q and k. LLaDA2.1's token editing reuses a block's MAGE set through
// its post-mask editing steps (method-specs §1.5).
void resolve_sparse(const ModelConfig& c, const DecodeParams& p) {
  const std::string name = to_string(p.sparse.method);
  const bool block_family =
      c.family == "sdar" || c.family == "fast_dllm_v2" || c.family == "llada2_moe";
  const bool llada2_edit = p.strategy == "edit" && c.family == "llada2_moe";
  if (!(p.strategy == "block" && block_family) && !llada2_edit)
    fail("--sparse ", name,
         " applies to --strategy block on SDAR, Fast-dLLM v2 and LLaDA2.x checkpoints and to "
         "--strategy edit on LLaDA2.x (not --strategy ",
         p.strategy, " on ", c.family, ")");
  // SparseD captures after a share of the request's nominal steps; token editing has none.
  if (llada2_edit && p.sparse.method == SparseMethod::kSparseD)
    fail(
        "--sparse sparsed needs a fixed number of steps (--strategy block); --strategy edit "
        "runs each block until its edits stop (use mage or quest)");
  if (p.fuse_commit) fail("--sparse ", name, " does not combine with --fuse-commit");
  if (p.sparse.measure_recall && p.sparse.method != SparseMethod::kMage)
    fail("--sparse-recall measures MAGE's selection (--sparse mage), not --sparse ", name);
  if (p.sparse.exact_layers > c.num_layers)
    fail("--sparse-exact-layers must be in [0, ", c.num_layers, "] (got ", p.sparse.exact_layers,
         ")");
}

void resolve_dllm_cache(const ModelConfig& c, DecodeParams& p) {
  refuse_llada_knobs(p, "--strategy dllmcache");
  refuse_dream_knobs(p, "--strategy dllmcache");
  if (!p.remasking.empty()) fail("--remasking does not apply to --strategy dllmcache");
  if (p.sub_block_length != 0) fail("--sub-block-length does not apply to --strategy dllmcache");
  if (p.block_length == 0) p.block_length = std::min<int32_t>(32, p.max_tokens);
  if (p.block_length < 0) fail("--block-length must be positive (got ", p.block_length, ")");
  if (p.max_tokens % p.block_length != 0)
    fail("--block-length ", p.block_length, " must divide --max-tokens ", p.max_tokens);
  const int32_t blocks = p.max_tokens / p.block_length;
  if (p.steps == 0) p.steps = p.max_tokens;
  if (p.steps < 0) fail("--steps must be positive (got ", p.steps, ")");
  if (p.steps % blocks != 0 || p.steps / blocks > p.block_length)
    fail("--steps ", p.steps, " must be a multiple of the number of blocks ", blocks,
         " with at most --block-length ", p.block_length, " steps per block");
  const bool dream = c.family == "dream";
  if (p.dlc_kp == 0) p.dlc_kp = dream ? 25 : 50;
  if (p.dlc_kr == 0) p.dlc_kr = dream ? 2 : 7;
  if (p.dlc_kp < 0) fail("--dlc-kp must be positive (got ", p.dlc_kp, ")");
  if (p.dlc_kr < 0) fail("--dlc-kr must be positive (got ", p.dlc_kr, ")");
  if (!(p.dlc_rho >= 0.0f && p.dlc_rho <= 1.0f))
    fail("--dlc-rho must be in [0, 1] (got ", p.dlc_rho, ")");
  if (!p.sampler.greedy() || p.sampler.top_k != 0 || (p.sampler.top_p >= 0 && p.sampler.top_p < 1))
    fail("--strategy dllmcache decodes greedily (--temperature 0, no --top-k / --top-p)");
}

}  // namespace

bool tempered_confidence(const DecodeParams& p) {
  return p.confidence.value_or(ConfidenceKind::kTempered) == ConfidenceKind::kTempered;
}

namespace {

// LLaDA2.x sampling (model-specs §6.5): the confidence is the sampled token's probability after
// top-k / top-p unless --confidence says otherwise; with the HF-2.0 quirk, temperature 0 samples
// at T = 1.
void resolve_llada2_sampling(DecodeParams& p) {
  if (!p.confidence) p.confidence = ConfidenceKind::kFiltered;
  if (p.hf_sampling_quirk && p.sampler.greedy()) p.sampler.temperature = 1.0f;
}

// LLaDA2.0 block diffusion (LLaDA2MoeModelLM.generate): blocks of 32, 32 steps capped at the
// generation length (steps = min(steps, gen_length // minimal_topk)), threshold 0.95.
void resolve_llada2_block(const ModelConfig& c, DecodeParams& p) {
  if (p.block_length == 0) p.block_length = static_cast<int32_t>(c.block_size);
  if (p.block_length <= 0) fail("--block-length must be positive (got ", p.block_length, ")");
  if (p.steps == 0) p.steps = p.block_length;
  if (p.steps < 0) fail("--steps must be positive (got ", p.steps, ")");
  p.steps = std::min(p.steps, p.max_tokens);
  if (p.steps > p.block_length)
    fail("--steps ", p.steps, " exceeds the block length ", p.block_length,
         " (at most one step per token)");
  if (p.remasking.empty()) p.remasking = "low_confidence_dynamic";
  if (p.remasking != "low_confidence_dynamic")
    fail("--remasking '", p.remasking, "' (LLaDA2.x: low_confidence_dynamic)");
  if (p.threshold < 0) p.threshold = 0.95f;
  resolve_llada2_sampling(p);
}

// LLaDA2.1 token editing (model-specs §6.6): S mode = SGLang JointThreshold's defaults (0.5 / 0),
// Q mode = the conservative pair of the LLaDA2.1 usage example (0.7 / 0.5); 16 post-mask steps.
// `who` names the request in errors (--strategy edit, or S2D2 over it).
void resolve_llada2_edit(const ModelConfig& c, DecodeParams& p, const std::string& who) {
  if (p.block_length == 0) p.block_length = static_cast<int32_t>(c.block_size);
  if (p.block_length <= 0) fail("--block-length must be positive (got ", p.block_length, ")");
  if (p.steps != 0)
    fail("--steps does not apply to ", who,
         " (each block runs until its masks are filled and its edits stop)");
  if (!p.remasking.empty()) fail("--remasking does not apply to ", who);
  if (p.edit_mode.empty()) p.edit_mode = "s";
  if (p.edit_mode != "s" && p.edit_mode != "q")
    fail("--edit-mode '", p.edit_mode, "' (expected s or q)");
  const bool quality = p.edit_mode == "q";
  if (p.threshold < 0) p.threshold = quality ? 0.7f : 0.5f;
  if (p.editing_threshold < 0) p.editing_threshold = quality ? 0.5f : 0.0f;
  if (!(p.editing_threshold <= 1.0f))
    fail("--editing-threshold must be in [0, 1] (got ", p.editing_threshold, ")");
  if (p.max_post_steps < 0) p.max_post_steps = 16;
  resolve_llada2_sampling(p);
}

// S2D2 over LLaDA2.1 token editing (s2d2_edit_decoder.h), chosen by --edit-mode on --strategy
// s2d2: the S2D2 paper runs LLaDA2.x only this way and its reference (phymhan/S2D2
// LLaDA2/generate_utils.py, generate_ssd_policy) drafts with generate_cached's editing loop.
// Why --edit-mode and not a new option or a new default: the draft *is* --strategy edit, so its
// presets, knobs and defaults carry over unchanged (the reference's eval script defaults are the
// Q pair 0.7 / 0.5), and a LLaDA2.0 checkpoint, which was never trained to edit, keeps S2D2 over
// block diffusion when the option is absent. The LLaDA2 reference has no causal-commit or
// causal-draft variant (§5.4 comes from its SDAR code), so --cache-ver / --draft-ver are refused.
void resolve_llada2_s2d2_edit(const ModelConfig& c, DecodeParams& p) {
  if (p.s2d2.cache_ver || p.s2d2.draft_ver)
    fail(
        "--cache-ver / --draft-ver do not apply to --strategy s2d2 with --edit-mode (the LLaDA2 "
        "reference verifies the block-causal token-editing draft only)");
  resolve_llada2_edit(c, p, "--strategy s2d2 with --edit-mode");
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
  if (p.strategy != "d2cache") {
    const DecodeParams defaults;
    if (p.d2c_k != defaults.d2c_k || p.d2c_sigma != defaults.d2c_sigma ||
        p.d2c_p != defaults.d2c_p || p.d2c_inflate != defaults.d2c_inflate || p.d2c_frozen_conf ||
        p.d2c_select_all)
      fail("--d2c-* options apply to --strategy d2cache only, not --strategy ", p.strategy);
  }
  if (p.strategy != "dllmcache" &&
      (p.dlc_kp != 0 || p.dlc_kr != 0 || p.dlc_rho != DecodeParams{}.dlc_rho))
    fail("--dlc-* options apply to --strategy dllmcache only, not --strategy ", p.strategy);
  const bool llada2_s2d2 = p.strategy == "s2d2" && c.family == "llada2_moe";
  if (p.strategy != "edit" && !llada2_s2d2 &&
      (!p.edit_mode.empty() || p.editing_threshold >= 0 || p.max_post_steps >= 0))
    fail(
        "--edit-mode, --editing-threshold and --max-post-steps apply to --strategy edit and "
        "--strategy s2d2 on LLaDA2.x checkpoints (LLaDA2.1 token editing), not --strategy ",
        p.strategy, " on ", c.family);
  if (llada2_s2d2 && p.edit_mode.empty() && (p.editing_threshold >= 0 || p.max_post_steps >= 0))
    fail(
        "--editing-threshold and --max-post-steps apply to --strategy s2d2 only with --edit-mode "
        "s|q (S2D2 over LLaDA2.1 token editing; without it the draft is LLaDA2.0 block "
        "diffusion)");
  if (p.hf_sampling_quirk && c.family != "llada2_moe")
    fail("--hf-sampling-quirk applies to LLaDA2.x checkpoints only, not ", c.family);
  if (p.fuse_commit && (p.strategy != "block" || c.family != "sdar"))
    fail("--fuse-commit applies to --strategy block on SDAR checkpoints only");
  if (p.strategy != "fastdllm" && !p.cache.empty())
    fail("--cache applies to --strategy fastdllm only, not --strategy ", p.strategy);
  if (p.strategy != "full") {
    refuse_llada_knobs(p, "--strategy " + p.strategy);
    refuse_dream_knobs(p, "--strategy " + p.strategy);
  }
  if (c.mask_token_id < 0 && !(p.strategy == "ar" && c.shifted_logits))
    fail("the checkpoint has no mask token id (set mask_token_id in config.json)");

  if (p.sparse.method != SparseMethod::kNone) resolve_sparse(c, p);
  if (p.strategy == "s2d2") {
    p.s2d2.validate();
    if (c.family == "fast_dllm_v2" && (p.s2d2.cache_ver || p.s2d2.draft_ver))
      fail("--cache-ver / --draft-ver apply to position-aligned models (SDAR) only, not ", c.family,
           " (method-specs §5.4)");
  }
  const bool wedlm = p.strategy == "wedlm";
  if (!wedlm) {
    if (p.window) fail("--window applies only to --strategy wedlm");
    if (p.entropy_threshold) fail("--entropy-threshold applies only to --strategy wedlm");
    if (p.pos_penalty) fail("--pos-penalty applies only to --strategy wedlm");
  }
  int32_t lookahead = 0;  // positions past prompt + max_tokens a forward may use

  if (wedlm) {
    // Knobs of the block decoders would be silently ignored: refuse them.
    if (p.block_length != 0)
      fail("--block-length does not apply to --strategy wedlm (see --window)");
    if (p.steps != 0) fail("--steps does not apply to --strategy wedlm");
    if (p.threshold >= 0)
      fail("--threshold does not apply to --strategy wedlm (see --entropy-threshold)");
    if (!p.remasking.empty()) fail("--remasking does not apply to --strategy wedlm");
    if (p.sub_block_length != 0) fail("--sub-block-length does not apply to --strategy wedlm");
    // Engine defaults (WeDLM wedlm/config.py, sampling_params.py; method-specs §3.1).
    if (!p.window) p.window = 16;
    if (*p.window <= 0) fail("--window must be positive (got ", *p.window, ")");
    if (!p.entropy_threshold) p.entropy_threshold = 0.4f;
    if (std::isnan(*p.entropy_threshold) ||
        (*p.entropy_threshold < 0 && !std::isinf(*p.entropy_threshold)))
      fail("--entropy-threshold must be >= 0 or 'none' (got ", *p.entropy_threshold, ")");
    if (!p.pos_penalty) p.pos_penalty = 0.02f;
    if (!std::isfinite(*p.pos_penalty) || *p.pos_penalty < 0)
      fail("--pos-penalty must be a finite number >= 0 (got ", *p.pos_penalty, ")");
    lookahead = 2 * *p.window;
  } else if (c.family == "llada2_moe") {
    if (p.strategy == "edit") {
      resolve_llada2_edit(c, p, "--strategy edit");
    } else if (p.strategy == "s2d2" && !p.edit_mode.empty()) {
      resolve_llada2_s2d2_edit(c, p);
    } else {
      // block, and s2d2 over it (without --edit-mode). The S2D2 paper runs LLaDA2.x only with
      // LLaDA2.1's editing (resolve_llada2_s2d2_edit) and says nothing of LLaDA2.0; decided
      // here: the draft is LLaDA2.0's block-diffusion forward with its defaults (blocks of 32,
      // steps = min(32, max_tokens), threshold 0.95 on the filtered probability as the fallback
      // rule, the HF-2.0 quirk), the routing keeps S2D2's defaults (verify always), and EOS ends
      // the answer as in --strategy block (cut at the first EOS once every token before it is
      // decided; the blocks after it never run).
      resolve_llada2_block(c, p);
    }
  } else if (p.strategy == "block" || p.strategy == "s2d2") {
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
  } else if (p.strategy == "d2cache") {
    resolve_d2cache(p);
  } else if (p.strategy == "fastdllm") {
    resolve_fastdllm_v1(p);
  } else if (p.strategy == "dllmcache") {
    resolve_dllm_cache(c, p);
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
  if (!wedlm) lookahead = p.block_length;
  if (p.sampler.top_p < 0) p.sampler.top_p = 1.0f;
  if (std::isnan(p.threshold) || p.threshold > 1.0f)
    fail("--threshold must be in [0, 1] (got ", p.threshold, ")");
  // WeDLM's sampler filters the raw logits (top-k, then top-p) and divides by T afterwards.
  p.sampler.order = wedlm ? FilterOrder::kTopKTopPTemperature
                    : p.strategy == "full" && c.family == "dream"
                        ? FilterOrder::kTemperatureTopPTopK
                        : FilterOrder::kTemperatureTopKTopP;
  // A decoder never decides a [MASK]: untrained (or tiny) models can put mass on it.
  if (c.mask_token_id >= 0)
    add_unique(p.sampler.banned_tokens, static_cast<int32_t>(c.mask_token_id));
  p.sampler.validate();
  // Positions past prompt + max_tokens a forward may use: block decoders run to the end of a
  // block, WeDLM's window reaches 2W ahead, full diffusion (a fixed canvas) never runs past.
  const bool canvas = p.strategy == "full" || p.strategy == "d2cache" || p.strategy == "fastdllm" ||
                      p.strategy == "dllmcache";
  const int64_t overhang = canvas ? 0 : lookahead;
  if (c.max_position_embeddings > 0 &&
      prompt_tokens + p.max_tokens + overhang > c.max_position_embeddings)
    fail("prompt (", prompt_tokens, " tokens) + --max-tokens ", p.max_tokens,
         " exceeds the model's context of ", c.max_position_embeddings, " positions",
         overhang > 0 ? cat(" (with the ", overhang, " positions a forward may run ahead: ",
                            wedlm ? "2 x --window" : "one block", ")")
                      : "");
  return p;
}

std::unique_ptr<Decoder> make_decoder(const ModelConfig& c, const DecodeParams& p,
                                      const std::vector<int32_t>& prompt) {
  for (int32_t id : prompt)
    if (id < 0 || id >= c.vocab_size)
      fail("prompt token id ", id, " is outside the vocabulary (size ", c.vocab_size, ")");
  if (p.strategy == "ar") return std::make_unique<ArDecoder>(c, p, prompt);
  if (p.strategy == "wedlm") return std::make_unique<WedlmDecoder>(c, p, prompt);
  if (p.strategy == "full" || p.strategy == "d2cache" || p.strategy == "fastdllm" ||
      p.strategy == "dllmcache") {
    for (int32_t id : prompt)
      if (id == c.mask_token_id)
        fail("the prompt contains the mask token id ", id,
             " (full diffusion would decode it as a generated position)");
    if (p.strategy == "d2cache") return std::make_unique<D2CacheDecoder>(c, p, prompt);
    if (p.strategy == "fastdllm") return std::make_unique<FastDllmV1Decoder>(c, p, prompt);
    if (p.strategy == "dllmcache") return std::make_unique<DllmCacheDecoder>(c, p, prompt);
    if (c.family == "llada") return std::make_unique<LladaDecoder>(c, p, prompt);
    return std::make_unique<DreamDecoder>(c, p, prompt);
  }
  if (p.strategy == "s2d2" && !p.edit_mode.empty())
    return std::make_unique<S2d2EditDecoder>(c, p, prompt);
  if (p.strategy == "s2d2") return std::make_unique<S2d2Decoder>(c, p, prompt);
  if (p.strategy == "edit") return std::make_unique<TokenEditingDecoder>(c, p, prompt);
  if (c.family == "fast_dllm_v2") return std::make_unique<FastDllmV2Decoder>(c, p, prompt);
  return std::make_unique<BlockDiffusionDecoder>(c, p, prompt);
}

}  // namespace dllm
