// Model::shard: one rank's model of a tensor-parallel group (tensor_parallel_plan.h). The rank's
// config has its own head / KV-head / FFN-feature counts, and its tensor store holds copies of
// its slices under the checkpoint's names, so every backend builds a rank exactly as it builds a
// whole model; only the partial sums after o and down need the group (an all-reduce).
#include <cstring>

#include "core/error.h"
#include "model/model.h"
#include "model/tensor_parallel_plan.h"

namespace dllm {

namespace {

// Rows [begin, end) of an [out, in] (or [out]) tensor, or the whole tensor for a null range.
void add_rows(TensorStore& store, const TensorEntry& t, IdRange rows) {
  const size_t elem = dtype_size(*t.dtype);
  const int64_t row_elems = t.shape.size() > 1 ? t.shape[1] : 1;
  std::vector<int64_t> shape = t.shape;
  shape[0] = rows.count;
  const size_t row_bytes = static_cast<size_t>(row_elems) * elem;
  const unsigned char* from = t.data + static_cast<size_t>(rows.begin) * row_bytes;
  store.add_owned(t.name, *t.dtype, std::move(shape),
                  {from, from + static_cast<size_t>(rows.count) * row_bytes});
}

// Columns [begin, end) of an [out, in] tensor (o and down: the rank's input features).
void add_columns(TensorStore& store, const TensorEntry& t, IdRange cols) {
  const size_t elem = dtype_size(*t.dtype);
  const size_t in_bytes = static_cast<size_t>(t.shape[1]) * elem;
  const size_t col_bytes = static_cast<size_t>(cols.count) * elem;
  std::vector<unsigned char> bytes(static_cast<size_t>(t.shape[0]) * col_bytes);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    std::memcpy(&bytes[static_cast<size_t>(r) * col_bytes],
                t.data + static_cast<size_t>(r) * in_bytes + static_cast<size_t>(cols.begin) * elem,
                col_bytes);
  store.add_owned(t.name, *t.dtype, {t.shape[0], cols.count}, std::move(bytes));
}

void add_whole(TensorStore& store, const TensorEntry* t) {
  if (t) add_rows(store, *t, {0, t->shape[0]});
}

// The sharded layers must agree on their counts: the rank's config has one of each.
void check_uniform(const TensorParallelPlan& plan) {
  const LayerShard& first = plan.layers.front();
  for (const LayerShard& s : plan.layers)
    if (s.attention.heads.count != first.attention.heads.count ||
        s.attention.kv_heads.count != first.attention.kv_heads.count ||
        s.ffn_features.count != first.ffn_features.count)
      fail("--tensor-parallel: layers of different shapes are not sharded (internal error)");
}

}  // namespace

std::unique_ptr<Model> Model::shard(const Model& whole, const TensorParallelPlan& plan) {
  const ModelConfig& c = whole.config();
  if (c.moe.num_experts > 0 || c.fused_qkv)
    fail("--tensor-parallel: ", c.model_type,
         " checkpoints (MoE layers, a fused QKV projection) are not sharded yet");
  if (plan.layers.size() != static_cast<size_t>(c.num_layers))
    fail("--tensor-parallel: the plan has ", plan.layers.size(), " layers, the model ",
         c.num_layers, " (internal error)");
  check_uniform(plan);
  std::unique_ptr<Model> m(new Model());
  m->dir_ = whole.dir_;
  m->family_ = whole.family_;
  m->config_ = c;
  const LayerShard& first = plan.layers.front();
  m->config_.num_heads = first.attention.heads.count;
  m->config_.num_kv_heads = first.attention.kv_heads.count;
  m->config_.intermediate_size = first.ffn_features.count;

  const ModelTensors& t = whole.tensors();
  TensorStore& store = m->store_;
  add_whole(store, t.embed);
  add_whole(store, t.final_norm);
  if (t.lm_head != t.embed) add_whole(store, t.lm_head);  // replicated: every rank's logits
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const LayerTensors& l = t.layers[i];
    const LayerShard& s = plan.layers[i];
    const IdRange q = q_rows(s.attention, c.head_dim), kv = kv_rows(s.attention, c.head_dim);
    add_whole(store, l.attn_norm);
    add_rows(store, *l.q, q);
    add_rows(store, *l.k, kv);
    add_rows(store, *l.v, kv);
    if (l.q_bias) {
      add_rows(store, *l.q_bias, q);
      add_rows(store, *l.k_bias, kv);
      add_rows(store, *l.v_bias, kv);
    }
    add_whole(store, l.q_norm);  // per head_dim: the same for every head
    add_whole(store, l.k_norm);
    add_columns(store, *l.o, q);
    add_whole(store, l.mlp_norm);
    add_rows(store, *l.gate, s.ffn_features);
    add_rows(store, *l.up, s.ffn_features);
    add_columns(store, *l.down, s.ffn_features);
  }
  m->config_.validate(whole.dir_.string() + " (tensor-parallel rank " + std::to_string(plan.rank) +
                      " of " + std::to_string(plan.world) + ")");
  m->resolve_tensors();
  return m;
}

}  // namespace dllm
