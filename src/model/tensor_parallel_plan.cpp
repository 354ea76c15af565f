#include "model/tensor_parallel_plan.h"

#include <algorithm>

#include "core/error.h"

namespace dllm {

namespace {

// `n` items in `world` equal shares; fails naming `field` when they do not divide.
IdRange even_share(int64_t n, int rank, int world, const char* field, int64_t layer) {
  if (n % world != 0)
    fail("--tensor-parallel ", world, ": layer ", layer, " has ", field, " ", n,
         ", not a multiple of ", world);
  return {rank * (n / world), n / world};
}

AttentionShard attention_shard(const AttentionDesc& a, int rank, int world, int64_t layer) {
  AttentionShard s;
  s.heads = even_share(a.heads, rank, world, "num_attention_heads", layer);
  if (a.kv_heads % world == 0) {
    s.kv_heads = {rank * (a.kv_heads / world), a.kv_heads / world};
  } else if (world % a.kv_heads == 0) {
    // Fewer KV heads than ranks: the rank's query heads all lie in one KV head's group (the
    // group is a multiple of the rank's share), which the rank keeps a copy of.
    const int64_t group = a.heads / a.kv_heads;
    s.kv_heads = {s.heads.begin / group, 1};
  } else {
    fail("--tensor-parallel ", world, ": layer ", layer, " has num_key_value_heads ", a.kv_heads,
         ", neither a multiple nor a divisor of ", world);
  }
  return s;
}

LayerShard layer_shard(const LayerDesc& d, int rank, int world, MoeSplit split, int64_t layer) {
  LayerShard s;
  s.attention = attention_shard(d.attention, rank, world, layer);
  if (d.ffn == FfnKind::kDenseSwiGlu) {
    s.ffn_features = even_share(d.intermediate_size, rank, world, "intermediate_size", layer);
    return s;
  }
  if (split == MoeSplit::kExperts) {
    s.experts = even_share(d.moe.num_experts, rank, world, "num_experts", layer);
    s.expert_features = {0, d.moe.expert_intermediate_size};
  } else {
    s.experts = {0, d.moe.num_experts};
    s.expert_features =
        even_share(d.moe.expert_intermediate_size, rank, world, "moe_intermediate_size", layer);
  }
  s.shared_features = even_share(d.moe.shared_intermediate_size(), rank, world,
                                 "shared experts' intermediate size", layer);
  return s;
}

}  // namespace

TensorParallelPlan plan_tensor_parallel(const std::vector<LayerDesc>& layers, int64_t vocab_size,
                                        int rank, int world, MoeSplit moe_split) {
  if (world < 1) fail("--tensor-parallel must be at least 1 (got ", world, ")");
  if (rank < 0 || rank >= world)
    fail("tensor parallel rank ", rank, " outside [0, ", world, ") (internal error)");
  if (vocab_size < world)
    fail("--tensor-parallel ", world, ": vocab_size ", vocab_size, " has fewer ids than ranks");
  TensorParallelPlan plan;
  plan.rank = rank;
  plan.world = world;
  for (size_t l = 0; l < layers.size(); ++l)
    plan.layers.push_back(layer_shard(layers[l], rank, world, moe_split, static_cast<int64_t>(l)));
  const int64_t base = vocab_size / world, extra = vocab_size % world;
  plan.vocab.begin = rank * base + std::min<int64_t>(rank, extra);
  plan.vocab.count = base + (rank < extra ? 1 : 0);
  return plan;
}

IdRange q_rows(const AttentionShard& shard, int64_t head_dim) {
  return {shard.heads.begin * head_dim, shard.heads.count * head_dim};
}

IdRange kv_rows(const AttentionShard& shard, int64_t head_dim) {
  return {shard.kv_heads.begin * head_dim, shard.kv_heads.count * head_dim};
}

std::vector<IdRange> fused_qkv_rows(const AttentionShard& shard, const AttentionDesc& attention) {
  const int64_t hd = attention.head_dim;
  const int64_t k_at = attention.heads * hd, v_at = k_at + attention.kv_heads * hd;
  const IdRange q = q_rows(shard, hd), kv = kv_rows(shard, hd);
  return {q, {k_at + kv.begin, kv.count}, {v_at + kv.begin, kv.count}};
}

}  // namespace dllm
