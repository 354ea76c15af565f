// What one rank of a tensor-parallel group holds (issue 27), Megatron style, from the family's
// layer description: every projection is cut so that a rank computes whole heads and whole FFN
// features, and one all-reduce (sum) per block joins the ranks' partial outputs.
//   column-parallel (a range of output rows of an [out, in] weight): q / k / v by heads, gate / up
//     by FFN features, the LM head by vocabulary ids (vocab_parallel_stats.h merges its rows);
//   row-parallel (the matching input columns): o by the rank's heads, down by its features —
//     their outputs are the partial sums the all-reduce adds.
// KV heads are split when the group size divides them, else replicated: with fewer KV heads than
// ranks, each rank holds the one KV head its query heads read. Norms, q/k-norm weights, the router
// and the embedding are replicated. MoE layers split the routed experts one of two ways (MoeSplit):
// every expert's features (tensor parallel inside the experts), or the experts themselves, whole
// (expert parallel: a rank computes only the routed rows of its experts). Activations are
// replicated on every rank, so expert parallelism needs no all-to-all: the rank's experts' share
// of a row joins the same all-reduce as the other partial sums. The shared experts split by
// feature either way.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layer_desc.h"

namespace dllm {

struct IdRange {
  int64_t begin = 0, count = 0;
  int64_t end() const { return begin + count; }
};

struct AttentionShard {
  IdRange heads;     // query heads
  IdRange kv_heads;  // KV heads held (the query heads' group, replicated or split)
};

enum class MoeSplit {
  kExpertFeatures,  // tensor parallel inside the experts (--tensor-parallel N)
  kExperts,         // expert parallel (--tensor-parallel N --expert-parallel)
};

struct LayerShard {
  AttentionShard attention;
  IdRange ffn_features;     // dense SwiGLU: rows of gate / up, columns of down
  IdRange experts;          // MoE: the routed experts held
  IdRange expert_features;  // MoE: the features held of each of them
  IdRange shared_features;  // MoE: of the shared experts' FFN
};

struct TensorParallelPlan {
  int rank = 0, world = 1;
  std::vector<LayerShard> layers;
  IdRange vocab;  // LM-head rows: vocab / world ids a rank, the first vocab % world one more
};

// The plan of `rank` in a group of `world` ranks. Errors name the config field a group of that
// size cannot split (--tensor-parallel N: num_attention_heads 28 is not a multiple of 3, ...).
TensorParallelPlan plan_tensor_parallel(const std::vector<LayerDesc>& layers, int64_t vocab_size,
                                        int rank, int world,
                                        MoeSplit moe_split = MoeSplit::kExpertFeatures);

// The output rows of a shard's q and of its k / v projections ([heads * head_dim, hidden]
// weights), and the three ranges of a fused [Q | K | V] projection (LLaDA2.x) in Q, K, V order.
IdRange q_rows(const AttentionShard& shard, int64_t head_dim);
IdRange kv_rows(const AttentionShard& shard, int64_t head_dim);
std::vector<IdRange> fused_qkv_rows(const AttentionShard& shard, const AttentionDesc& attention);

}  // namespace dllm
