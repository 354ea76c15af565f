// Decoder: a strategy as a small state machine over host-side token arrays (DESIGN.md).
//   plan()    -> the next forward (tokens, positions, rule, cache write, rows wanted)
//   observe() <- that forward's per-row TokenStats; unmask / commit
// Decoders never see tensors. Generated tokens become *final* once they can no longer change and
// every token before them is final; the engine streams them and applies stop rules and max_tokens.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention/sparse_attention.h"
#include "backend/forward_batch.h"
#include "decode/s2d2_policy.h"
#include "model/model_config.h"

namespace dllm {

// How a block decoder turns TokenStats into the confidence its unmasking rule compares.
enum class ConfidenceKind {
  kTempered,  // p(token) under softmax(logits / T) before top-k/top-p (SDAR evaluation path;
              // default)
  kFiltered,  // p(token) under the filtered distribution (SDAR generate.py)
};

struct DecodeParams;
// Whether the unmasking rule compares tempered probabilities (the default when unset).
bool tempered_confidence(const DecodeParams& p);

// Everything a decoder reads; family defaults are filled in by resolve_decode_params().
struct DecodeParams {
  static constexpr int32_t kFamilyDefault = std::numeric_limits<int32_t>::min();

  // "block" | "ar" | "s2d2" | "full" | "d2cache" | "fastdllm" | "dllmcache" | "wedlm" | "edit"
  std::string strategy;
  // Generated tokens at most (stop token excluded); full diffusion: the canvas length.
  int32_t max_tokens = kFamilyDefault;  // LLaDA full 128, otherwise 256
  int32_t block_length = 0;
  int32_t steps = 0;        // denoising steps per block (block, LLaDA full: in all; Dream: in all)
  float threshold = -1.0f;  // < 0: family default
  // block: low_confidence_dynamic | low_confidence_static | sequential;
  // LLaDA full: low_confidence | random
  std::string remasking;
  int32_t sub_block_length = 0;  // Fast-dLLM v2 sub-blocks
  // SDAR block diffusion: commit a finished block in the same forward as the next block's first
  // denoising step (append its rows, the next block's as scratch after them). The same tokens as
  // separate commit forwards (the random stream counts the commit as its own step), one forward
  // fewer per block.
  bool fuse_commit = false;
  // Unset: the family's default (tempered; LLaDA2.x: filtered, as its generate() does).
  std::optional<ConfidenceKind> confidence;
  // WeDLM streaming parallel decoding (method-specs §3); unset: family defaults.
  std::optional<int32_t> window;           // W slots after the committed prefix (16)
  std::optional<float> entropy_threshold;  // tau in nats (0.4); -inf = none: one token per step
  std::optional<float> pos_penalty;        // lambda per window slot (0.02)
  // Pads every window forward to 2W queries with trailing masks (exact under causal attention):
  // one fixed forward shape per step, which a CUDA graph can capture.
  bool pad_window = true;
  // LLaDA full diffusion (model-specs §4.5)
  float cfg_scale = 0.0f;               // classifier-free guidance; 0: off
  bool logits_eos_inf = false;          // EOS never chosen
  bool confidence_eos_eot_inf = false;  // EoT (and at T = 0 EOS) confidence 0, the reference quirk
  // Dream full diffusion (model-specs §5.3)
  std::string alg;        // origin | maskgit_plus | topk_margin | entropy
  float alg_temp = 0.0f;  // > 0: positions drawn from softmax(confidence / alg_temp)
  // d2Cache (method-specs §4.1); block_length defaults to max_tokens (NAR), steps to max_tokens,
  // threshold < 0: one token per step (the threshold variant otherwise).
  int32_t d2c_k = 32;            // masked tokens recomputed per step (stage 1)
  float d2c_sigma = 10.0f;       // certainty-density Gaussian std; 0: certainty prior off
  float d2c_p = 0.1f;            // rollout nucleus (stage 2)
  int32_t d2c_inflate = 0;       // fill selection gaps of at most this span
  bool d2c_frozen_conf = false;  // the reference's step-0 confidence cache (§4.6 quirk 1)
  bool d2c_select_all = false;   // recompute every row every step (verification)
  // Fast-dLLM v1 (method-specs §6.4): "dual" (default) | "prefix".
  std::string cache;
  // dLLM-Cache (method-specs §6.3): refresh intervals (0: family default, LLaDA 50 / 7, Dream
  // 25 / 2, the GSM8K rows of d2Cache's table) and the value-similarity refresh fraction.
  int32_t dlc_kp = 0;
  int32_t dlc_kr = 0;
  float dlc_rho = 0.25f;
  S2d2Params s2d2;  // --strategy s2d2 (method-specs §5)
  // Sparse attention over the cached prefix (--sparse; --strategy block on SDAR, Fast-dLLM v2,
  // LLaDA2.x).
  SparseParams sparse;
  // LLaDA2.x (model-specs §6.5/6.6). LLaDA2.0's HF generate() has no greedy branch: at
  // temperature 0 it samples at T = 1 and its confidence is the sampled token's probability; this
  // flag reproduces that (default: temperature 0 is true greedy).
  bool hf_sampling_quirk = false;
  // --strategy edit (LLaDA2.1 M2T + T2T): "s" (threshold 0.5, editing 0.0) or "q" (0.7 / 0.5)
  // presets; explicit --threshold / --editing-threshold override them.
  std::string edit_mode;
  float editing_threshold = -1.0f;  // < 0: the mode's
  int32_t max_post_steps = -1;      // < 0: 16
  SamplerConfig sampler;
  uint64_t seed = 0;
  uint32_t sequence_id = 0;
};

// One strategy-specific number for the stats line and JSON (WeDLM's p_cache, ...).
struct DecoderMetric {
  std::string name;
  double value = 0;
  bool is_count = false;  // an integer count (printed without decimals)
};

// Speculative decoders' counters (S2D2): verification forwards, tokens accepted as drafted and
// rejections (each rejection also decodes one resampled token).
struct SpeculationStats {
  int64_t verify_calls = 0;
  int64_t accepted = 0;
  int64_t rejected = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Fills `fwd` (already reset by the caller) with the next forward; false when finished.
  virtual bool plan(SequenceForward& fwd) = 0;
  virtual void observe(const SequenceResult& result) = 0;
  // One decoding step may need several forwards in the same batch (LLaDA's classifier-free
  // guidance adds an unconditional pass). The engine calls these: `fwds` arrives holding one
  // reset forward and may be extended; observe_step() gets one result per forward, in order.
  // The defaults are plan() / observe() on a single forward.
  virtual bool plan_step(std::vector<SequenceForward>& fwds) { return plan(fwds.at(0)); }
  virtual void observe_step(std::span<const SequenceResult> results) { observe(results[0]); }
  // Generated tokens that are final, in order (only grows).
  const std::vector<int32_t>& final_tokens() const { return final_; }
  // The generated region as it stands: final tokens, then the undecided window with masks
  // (for traces and trajectory tests).
  virtual std::vector<int32_t> canvas() const = 0;
  // KV cache capacity the decoder will need for this request (0: it runs without a cache).
  virtual int64_t cache_capacity() const = 0;
  int64_t forwards() const { return forwards_; }
  // Strategy-specific metrics once generation ended; `generated_tokens` is what the request
  // returned (stop token excluded). Empty for strategies without any.
  virtual std::vector<DecoderMetric> metrics(int64_t generated_tokens) const {
    (void)generated_tokens;
    return {};
  }
  // Non-null for speculative decoders.
  virtual const SpeculationStats* speculation() const { return nullptr; }

 protected:
  std::vector<int32_t> final_;
  int64_t forwards_ = 0;
};

// Fills unset knobs from the family (model-specs) and validates them; errors name the parameter.
DecodeParams resolve_decode_params(const ModelConfig& config, DecodeParams params,
                                   int64_t prompt_tokens);

std::unique_ptr<Decoder> make_decoder(const ModelConfig& config, const DecodeParams& params,
                                      const std::vector<int32_t>& prompt);

}  // namespace dllm
