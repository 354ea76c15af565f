#include "decode/decode_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace dllm {

namespace {

constexpr int32_t kMaxCount = 1 << 24;  // steps, tokens, slots: far past any real request

int64_t parse_integer(const std::string& name, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    fail("--", name, " must be a whole number (got '", v, "')");
  if (x < lo || x > hi) {
    if (lo == 1 && x < lo) fail("--", name, " must be positive (got ", x, ")");
    fail("--", name, " must be in [", lo, ", ", hi, "] (got ", x, ")");
  }
  return x;
}

double parse_number(const std::string& name, const std::string& v) {
  char* end = nullptr;
  const double x = v.empty() ? 0.0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x))
    fail("--", name, " must be a finite number (got '", v, "')");
  return x;
}

float parse_in(const std::string& name, const std::string& v, double lo, double hi,
               const char* accepted) {
  const double x = parse_number(name, v);
  if (x < lo || x > hi) fail("--", name, " must be ", accepted, " (got ", v, ")");
  return static_cast<float>(x);
}

bool parse_bool(const std::string& name, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  fail("--", name, " must be true or false (got '", v, "')");
}

using Apply = std::function<void(DecodeParams&, const std::string&)>;

DecodeOption integer(std::string name, std::string help, int32_t DecodeParams::*field,
                     int64_t lo = 1, int64_t hi = kMaxCount, std::string group = {}) {
  Apply f = [name, field, lo, hi](DecodeParams& p, const std::string& v) {
    p.*field = static_cast<int32_t>(parse_integer(name, v, lo, hi));
  };
  return {name, std::move(help), std::move(group), false, std::move(f)};
}

DecodeOption number(std::string name, std::string help, float DecodeParams::*field, double lo,
                    double hi, const char* accepted) {
  Apply f = [name, field, lo, hi, accepted](DecodeParams& p, const std::string& v) {
    p.*field = parse_in(name, v, lo, hi, accepted);
  };
  return {name, std::move(help), {}, false, std::move(f)};
}

DecodeOption word(std::string name, std::string help, std::string DecodeParams::*field) {
  Apply f = [field](DecodeParams& p, const std::string& v) { p.*field = v; };
  return {name, std::move(help), {}, false, std::move(f)};
}

DecodeOption flag(std::string name, std::string help, bool DecodeParams::*field) {
  Apply f = [name, field](DecodeParams& p, const std::string& v) {
    p.*field = parse_bool(name, v);
  };
  return {name, std::move(help), {}, true, std::move(f)};
}

// S2D2 knobs (S2d2Params; ranges checked by S2d2Params::validate).
const char* kS2d2 = "S2D2 (--strategy s2d2)";
DecodeOption s2d2_number(std::string name, std::string help, float S2d2Params::*field) {
  Apply f = [name, field](DecodeParams& p, const std::string& v) {
    p.s2d2.*field = static_cast<float>(parse_number(name, v));
  };
  return {name, std::move(help), kS2d2, false, std::move(f)};
}
DecodeOption s2d2_integer(std::string name, std::string help, int32_t S2d2Params::*field,
                          int64_t hi) {
  Apply f = [name, field, hi](DecodeParams& p, const std::string& v) {
    p.s2d2.*field = static_cast<int32_t>(parse_integer(name, v, 1, hi));
  };
  return {name, std::move(help), kS2d2, false, std::move(f)};
}
DecodeOption s2d2_word(std::string name, std::string help, std::string S2d2Params::*field) {
  Apply f = [field](DecodeParams& p, const std::string& v) { p.s2d2.*field = v; };
  return {name, std::move(help), kS2d2, false, std::move(f)};
}
DecodeOption s2d2_flag(std::string name, std::string help, bool S2d2Params::*field) {
  Apply f = [name, field](DecodeParams& p, const std::string& v) {
    p.s2d2.*field = parse_bool(name, v);
  };
  return {name, std::move(help), kS2d2, true, std::move(f)};
}

// Sparse-attention knobs (SparseParams; checked against the model by resolve_decode_params).
const char* kSparse =
    "Sparse attention (--strategy block: SDAR / Fast-dLLM v2 / LLaDA2.x; --strategy edit: mage, "
    "quest)";
DecodeOption sparse_integer(std::string name, std::string help, int32_t SparseParams::*field,
                            int64_t lo, int64_t hi) {
  Apply f = [name, field, lo, hi](DecodeParams& p, const std::string& v) {
    p.sparse.*field = static_cast<int32_t>(parse_integer(name, v, lo, hi));
  };
  return {name, std::move(help), kSparse, false, std::move(f)};
}

std::vector<DecodeOption> make_table() {
  using P = DecodeParams;
  using S = S2d2Params;
  std::vector<DecodeOption> t = {
      word("strategy",
           "block | ar | s2d2 (SDAR, Fast-dLLM v2) | full | d2cache | fastdllm | dllmcache "
           "(LLaDA, Dream) | wedlm | ar (WeDLM) | block | edit | s2d2 (LLaDA2.x) (default: the "
           "family's)",
           &P::strategy),
      integer("max-tokens",
              "Maximum generated tokens; full diffusion: the canvas length (default 128 for "
              "LLaDA, 256 otherwise)",
              &P::max_tokens),
      integer("block-length", "Block length (default: the checkpoint's; LLaDA 32)",
              &P::block_length),
      integer("sub-block-length", "Fast-dLLM v2 sub-block length (default 8)",
              &P::sub_block_length),
      integer("steps",
              "Denoising steps: per block for --strategy block (default: block length), in all "
              "for full diffusion (default: --max-tokens)",
              &P::steps),
      number("threshold", "Confidence threshold in [0, 1] (default 0.9)", &P::threshold, 0, 1,
             "in [0, 1]"),
      flag("fuse-commit",
           "SDAR block diffusion: commit a finished block in the same forward as the next "
           "block's first denoising step (same tokens, one forward fewer per block)",
           &P::fuse_commit),
      word("remasking",
           "block: low_confidence_dynamic (default) | low_confidence_static | sequential; LLaDA: "
           "low_confidence (default) | random",
           &P::remasking),
      {"confidence",
       "tempered: p under softmax(logits/T) before top-k/top-p (SDAR evaluation, default) | "
       "filtered: p after filtering (SDAR generate.py)",
       {},
       false,
       [](P& p, const std::string& v) {
         if (v != "tempered" && v != "filtered")
           fail("--confidence '", v, "' (expected tempered or filtered)");
         p.confidence = v == "tempered" ? ConfidenceKind::kTempered : ConfidenceKind::kFiltered;
       }},
      flag("hf-sampling-quirk",
           "LLaDA2.x: at temperature 0 sample at T = 1 and use the sampled token's probability, "
           "as LLaDA2.0's Hugging Face generate() does (default: true greedy)",
           &P::hf_sampling_quirk),
      word("edit-mode",
           "LLaDA2.1 --strategy edit presets: s (speed: threshold 0.5, editing threshold 0; "
           "default) | q (quality: 0.7 / 0.5); with --strategy s2d2 on LLaDA2.x it selects S2D2 "
           "over token editing",
           &P::edit_mode),
      number("editing-threshold",
             "LLaDA2.1 --strategy edit (and s2d2 --edit-mode): overwrite a generated token when "
             "the model's token differs with probability above this (default: the --edit-mode's)",
             &P::editing_threshold, 0, 1, "in [0, 1]"),
      integer("max-post-steps",
              "LLaDA2.1 --strategy edit (and s2d2 --edit-mode): editing forwards after a block's "
              "masks are gone (default 16)",
              &P::max_post_steps, 0, 1 << 16),
      number("cfg-scale", "LLaDA classifier-free guidance scale (default 0 = off)", &P::cfg_scale,
             0, 1e4, ">= 0 (at most 10000)"),
      flag("logits-eos-inf", "LLaDA: never generate EOS", &P::logits_eos_inf),
      flag("confidence-eos-eot-inf",
           "LLaDA: EoT (and, greedy, EOS) get confidence 0, as generate.py does",
           &P::confidence_eos_eot_inf),
      word("alg", "Dream: origin | maskgit_plus | topk_margin | entropy (default)", &P::alg),
      number("alg-temp",
             "Dream: > 0 draws positions from softmax(confidence / alg_temp) (default 0)",
             &P::alg_temp, 0, 1e4, ">= 0 (at most 10000)"),
      word("cache", "fastdllm (Fast-dLLM v1): dual (default) | prefix KV cache", &P::cache),
      integer("dlc-kp", "dllmcache: prompt refresh interval K_p (default LLaDA 50, Dream 25)",
              &P::dlc_kp),
      integer("dlc-kr", "dllmcache: response refresh interval K_r (default LLaDA 7, Dream 2)",
              &P::dlc_kr),
      number("dlc-rho", "dllmcache: fraction of response rows refreshed by value similarity (0.25)",
             &P::dlc_rho, 0, 1, "in [0, 1]"),
      integer("d2c-k", "d2cache: masked tokens recomputed per step (default 32)", &P::d2c_k),
      number("d2c-sigma", "d2cache: certainty-density std (default 10; 0 = certainty prior off)",
             &P::d2c_sigma, 0, 1e9, ">= 0 (at most 1e9)"),
      number("d2c-p", "d2cache: attention-rollout nucleus (default 0.1)", &P::d2c_p, 0, 1,
             "in [0, 1]"),
      integer("d2c-inflate",
              "d2cache: also recompute gaps of at most this span between selected tokens "
              "(default 0)",
              &P::d2c_inflate, 0),
      flag("d2c-frozen-conf",
           "d2cache: keep step 0's confidences for the selection, as the reference code does "
           "(default: current confidences, as the paper)",
           &P::d2c_frozen_conf),
      flag("d2c-select-all", "d2cache: recompute every row every step (verification)",
           &P::d2c_select_all),
      {"window",
       "WeDLM window: slots after the committed prefix (default 16)",
       {},
       false,
       [](P& p, const std::string& v) {
         p.window = static_cast<int32_t>(parse_integer("window", v, 1, 4096));
       }},
      {"entropy-threshold",
       "WeDLM: fill every mask whose entropy (nats) + pos-penalty * distance is below this "
       "(default 0.4); none = one token per step",
       {},
       false,
       [](P& p, const std::string& v) {
         if (v == "none") {
           p.entropy_threshold = -std::numeric_limits<float>::infinity();
           return;
         }
         char* end = nullptr;
         const double x = v.empty() ? 0.0 : std::strtod(v.c_str(), &end);
         if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x))
           fail("--entropy-threshold must be a number >= 0 or 'none' (got '", v, "')");
         if (x < 0) fail("--entropy-threshold must be >= 0 or 'none' (got ", v, ")");
         p.entropy_threshold = static_cast<float>(x);
       }},
      {"pos-penalty",
       "WeDLM: entropy penalty per window slot from the first mask (default 0.02)",
       {},
       false,
       [](P& p, const std::string& v) {
         const double x = parse_number("pos-penalty", v);
         if (x < 0) fail("--pos-penalty must be a finite number >= 0 (got ", v, ")");
         p.pos_penalty = static_cast<float>(x);
       }},
      {"pad-window",
       "WeDLM: pad each step's forward to 2*window queries, one fixed shape: true (default on "
       "CUDA, for graph capture) | false (default on the CPU)",
       {},
       false,
       [](P& p, const std::string& v) { p.pad_window = parse_bool("pad-window", v); }},
      {"sparse",
       "none (default) | mage | quest | sparsed: sparse attention over the cached prefix "
       "(method-specs §1, §6.1, §6.2)",
       kSparse, false,
       [](P& p, const std::string& v) { p.sparse.method = parse_sparse_method(v); }},
      sparse_integer("sparse-k", "prefix keys kept per layer and KV head (default 1024)",
                     &SparseParams::k, 1, kMaxCount),
      sparse_integer("sparse-exact-layers", "the first N layers always attend exactly (default 2)",
                     &SparseParams::exact_layers, 0, kMaxCount),
      sparse_integer("sparse-select-queries",
                     "mage: select from N of the block's queries, spread evenly (default 0: all)",
                     &SparseParams::select_queries, 0, kMaxCount),
      sparse_integer("sparse-page-size", "quest: keys per page (default 16)",
                     &SparseParams::page_size, 1, 4096),
      {"sparse-recall",
       "mage: every later step of a block attends exactly and scores the block's first selection "
       "against its exact top-k (the paper's recall diagnostic; metrics mage_recall, "
       "mage_recall_steps)",
       kSparse, true,
       [](P& p, const std::string& v) {
         p.sparse.measure_recall = parse_bool("sparse-recall", v);
       }},
      {"sparse-dense-fraction",
       "sparsed: share of all denoising steps attended exactly before the capture (default 0.2)",
       kSparse, false,
       [](P& p, const std::string& v) {
         p.sparse.dense_fraction = parse_in("sparse-dense-fraction", v, 0, 1, "in [0, 1]");
       }},
      s2d2_word("verify-policy", "span | score | hysteresis | bandit (default span: always verify)",
                &S::policy),
      s2d2_integer("verify-span-min", "span: verify iff |C| >= N (default 1)", &S::span_min,
                   kMaxCount),
      s2d2_word("verify-score-type", "static (K - c) | dynamic (K - c * N_hi, default)",
                &S::score_type),
      s2d2_number("verify-cost", "score cost c (default 2)", &S::score_cost),
      s2d2_number("verify-threshold", "score: verify iff score >= this (default 0)",
                  &S::score_threshold),
      s2d2_number("hysteresis-on", "hysteresis: turn on above (default 0)", &S::hysteresis_on),
      s2d2_number("hysteresis-off", "hysteresis: turn off below (default -1)", &S::hysteresis_off),
      s2d2_word("acceptance-estimator",
                "soft-entropy | hard-margin (default) | hard-entropy | confidence-power | "
                "clipped-linear-margin | renyi-2",
                &S::estimator),
      s2d2_number("entropy-beta", "soft-entropy beta (default 1)", &S::entropy_beta),
      s2d2_number("margin-threshold", "hard-margin (default 0.05)", &S::margin_threshold),
      s2d2_number("hard-entropy-threshold", "hard-entropy estimator threshold (default 0.1)",
                  &S::entropy_threshold),
      s2d2_number("confidence-power", "confidence-power (default 0.8)", &S::confidence_power),
      s2d2_number("margin-coef", "clipped-linear-margin (default 1)", &S::margin_coef),
      s2d2_number("accept-gamma", "acceptance tempering (q/p)^gamma (default 1)", &S::gamma),
      s2d2_number("ucb-beta", "bandit exploration (default 1)", &S::ucb_beta),
      // Bins multiply into the bandit's table: at most 64 each keeps it small.
      s2d2_integer("ucb-span-bins", "bandit span-length bins (default 2)", &S::ucb_span_bins, 64),
      s2d2_integer("ucb-progress-bins", "bandit progress bins (2)", &S::ucb_progress_bins, 64),
      s2d2_integer("ucb-entropy-bins", "bandit entropy bins (2)", &S::ucb_entropy_bins, 64),
      s2d2_flag("cache-ver", "SDAR: causal prefill / commit forwards", &S::cache_ver),
      s2d2_flag("draft-ver", "SDAR: decoded in-block prefix causal in drafts", &S::draft_ver),
  };
  return t;
}

}  // namespace

const std::vector<DecodeOption>& decode_options() {
  static const std::vector<DecodeOption> table = make_table();
  return table;
}

std::string canonical_option_name(std::string_view name) {
  std::string s(name);
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

void apply_decode_options(DecodeParams& params, const std::map<std::string, std::string>& options) {
  std::vector<std::string> s2d2_given, sparse_given;
  for (const auto& [raw, value] : options) {
    const std::string name = canonical_option_name(raw);
    const auto& table = decode_options();
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const DecodeOption& o) { return o.name == name; });
    if (it == table.end()) fail("unknown decoding option '", raw, "'");
    it->apply(params, value);
    if (it->group == kS2d2) s2d2_given.push_back(name);
    if (it->group == kSparse && name != "sparse") sparse_given.push_back(name);
  }
  if (!sparse_given.empty() && params.sparse.method == SparseMethod::kNone)
    fail("--", sparse_given.front(), " needs --sparse mage, quest or sparsed");
  if (!s2d2_given.empty() && params.strategy != "s2d2")
    fail("--", s2d2_given.front(), " applies to --strategy s2d2 only");
}

}  // namespace dllm
