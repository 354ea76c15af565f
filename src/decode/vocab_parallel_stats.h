// Token statistics over a vocabulary split between ranks (tensor parallelism, issue 27): each rank
// holds the LM-head rows of one contiguous id range, so it has only its slice of a row's logits.
// Instead of gathering the logits (151K floats a row), every rank reduces its slice to a
// VocabShardPartial — maxima, sums of exponentials, its Gumbel-max winner — and the partials merge
// into the TokenStats compute_token_stats() gives on the whole row (the same ids; probabilities to
// rounding: the sums run in another order). An inverse-CDF draw takes a second, local pass on the
// one rank whose range holds it.
//
// Rows whose sampler filters (top-k / top-p) cannot merge this way — the filters rank the whole
// vocabulary — and gather their logits instead (vocab_shards_merge() says which).
#pragma once

#include <cstdint>
#include <limits>
#include <span>

#include "decode/rng.h"
#include "decode/token_stats.h"

namespace dllm {

// One rank's slice of one row, ids [vocab_begin, vocab_begin + logits.size()). Banned tokens
// count as absent (-inf), as in compute_token_stats. Sums are relative to the slice's own max.
struct VocabShardPartial {
  int32_t vocab_begin = 0;
  float max_logit = -std::numeric_limits<float>::infinity();
  int32_t argmax = -1;  // global id of the first maximum; -1: every token of the slice is banned
  float second_logit = -std::numeric_limits<float>::infinity();  // a second maximum counts
  double sum_exp = 0;                                            // sum exp(l - max_logit)
  double sum_exp_shifted = 0;  // sum exp(l - max_logit) * (l - max_logit): the entropy's
  double sum_exp_sq = 0;       // sum exp(2 (l - max_logit)): S2D2's collision (sum of p^2)
  double confidence_exp = 0;   // sum exp(l - max_logit) over tokens the confidence keeps
  // The sampling distribution softmax(l / t), t = the temperature (1 when greedy).
  double sum_exp_tempered = 0;          // sum exp((l - max_logit) / t)
  double sum_exp_tempered_shifted = 0;  // sum exp((l - max_logit) / t) * (l - max_logit) / t
  // Gumbel-max sampling: the slice's winner exp(l) / (-log u_v)^t, its id and logit.
  double gumbel_value = -1;
  int32_t gumbel_token = -1;
  float gumbel_logit = 0;
};

// Whether rows of this sampler merge from partials (no top-k / top-p that can drop a token of a
// vocabulary of `vocab` ids); else their logits must be gathered.
bool vocab_shards_merge(const SamplerConfig& sampler, int64_t vocab);

// The partial of one rank's slice. `rng` and `position`: the row's, for Gumbel-max draws (their
// index is the global id, so every rank draws what the whole row would).
VocabShardPartial vocab_shard_partial(std::span<const float> logits, int32_t vocab_begin,
                                      const SamplerConfig& sampler, const RngKey* rng,
                                      int32_t position);

// An inverse-CDF draw u over the merged sampling distribution: the shard (index into `shards`,
// ascending vocab_begin) whose ids hold it and the draw's target within that shard's own scale,
// for draw_in_shard() on that rank.
struct ShardDraw {
  size_t shard = 0;
  double local_target = 0;
};
ShardDraw locate_shard_draw(std::span<const VocabShardPartial> shards, const SamplerConfig& sampler,
                            double u);

struct DrawnToken {
  int32_t token = -1;
  float logit = 0;
};
// The second pass on the shard locate_shard_draw() named: the first id (in id order) whose
// cumulative exp((l - max) / t) passes local_target; the shard's last unbanned token when
// rounding leaves the target unreached (as compute_token_stats does at u near 1).
DrawnToken draw_in_shard(std::span<const float> logits, int32_t vocab_begin,
                         const SamplerConfig& sampler, double local_target);

// The row's statistics from every shard's partial (ascending vocab_begin; together the whole
// vocabulary). `drawn`: the inverse-CDF draw's token for sampled rows; ignored for greedy and
// Gumbel-max rows, whose token the partials hold.
TokenStats merge_vocab_shards(std::span<const VocabShardPartial> shards,
                              const SamplerConfig& sampler, DrawnToken drawn);

// The row's sum of p^2 under softmax(l) (S2D2's Renyi-2 estimator on greedy rows).
double merged_collision(std::span<const VocabShardPartial> shards);

}  // namespace dllm
