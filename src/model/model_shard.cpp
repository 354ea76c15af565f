// Model::shard: one rank's model of a tensor-parallel group (tensor_parallel_plan.h). The rank's
// config has its own head / KV-head / FFN-feature counts, and its tensor store holds its slices
// (views of whole rows, copies of column slices) under the checkpoint's names, so every backend
// builds a rank exactly as it builds a whole model; only the partial sums after o and down need
// the group (an all-reduce).
#include <cstring>
#include <string>

#include "core/error.h"
#include "model/families/family.h"
#include "model/layer_desc.h"
#include "model/model.h"
#include "model/tensor_parallel_plan.h"

namespace dllm {

namespace {

// Columns [begin, end) of an [out, in] tensor (o and down: the rank's input features); all of
// them (an expert-parallel rank's whole experts) are a view.
void add_columns(TensorStore& store, const TensorEntry& t, IdRange cols) {
  if (cols.begin == 0 && cols.count == t.shape[1]) {
    store.add_view(t.name, *t.dtype, t.shape, t.data);
    return;
  }
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

// Several row ranges of an [out, in] (or [out]) tensor, concatenated in order (a fused
// [Q | K | V] projection: the rank's Q rows, then its K rows, then its V rows). One range is a
// view of the whole tensor's rows.
void add_row_ranges(TensorStore& store, const TensorEntry& t, const std::vector<IdRange>& ranges,
                    const std::string& name) {
  const int64_t row_elems = t.shape.size() > 1 ? t.shape[1] : 1;
  const size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(*t.dtype);
  std::vector<int64_t> shape = t.shape;
  if (ranges.size() == 1) {
    shape[0] = ranges[0].count;
    store.add_view(name, *t.dtype, std::move(shape),
                   t.data + static_cast<size_t>(ranges[0].begin) * row_bytes);
    return;
  }
  std::vector<unsigned char> bytes;
  shape[0] = 0;
  for (const IdRange& r : ranges) {
    const unsigned char* from = t.data + static_cast<size_t>(r.begin) * row_bytes;
    bytes.insert(bytes.end(), from, from + static_cast<size_t>(r.count) * row_bytes);
    shape[0] += r.count;
  }
  store.add_owned(name, *t.dtype, std::move(shape), std::move(bytes));
}

void add_row_ranges(TensorStore& store, const TensorEntry& t, const std::vector<IdRange>& ranges) {
  add_row_ranges(store, t, ranges, t.name);
}

void add_rows(TensorStore& store, const TensorEntry& t, IdRange rows) {
  add_row_ranges(store, t, {rows});
}

void add_whole(TensorStore& store, const TensorEntry* t) {
  if (t) add_rows(store, *t, {0, t->shape[0]});
}

// A SwiGLU FFN's slice: rows of gate / up and columns of down for the rank's features.
void add_ffn(TensorStore& store, const FfnTensors& f, IdRange features) {
  add_rows(store, *f.gate, features);
  add_rows(store, *f.up, features);
  add_columns(store, *f.down, features);
}

// The sharded layers must agree on their counts: the rank's config has one of each (dense
// layers' FFN features, MoE layers' expert features).
void check_uniform(const TensorParallelPlan& plan, const MoeConfig& moe) {
  const LayerShard& first = plan.layers.front();
  const LayerShard& last = plan.layers.back();
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerShard& s = plan.layers[i];
    const LayerShard& like = moe.is_moe_layer(static_cast<int64_t>(i)) ? last : first;
    if (s.attention.heads.count != first.attention.heads.count ||
        s.attention.kv_heads.count != first.attention.kv_heads.count ||
        s.ffn_features.count != like.ffn_features.count || s.experts.begin != like.experts.begin ||
        s.experts.count != like.experts.count ||
        s.expert_features.count != like.expert_features.count ||
        s.shared_features.count != like.shared_features.count)
      fail("--tensor-parallel: layers of different shapes are not sharded (internal error)");
  }
}

// `whole`: the whole model's attention (where a fused projection's K and V rows start).
void add_attention(TensorStore& store, const LayerTensors& l, const AttentionShard& a,
                   const AttentionDesc& whole) {
  const IdRange q = q_rows(a, whole.head_dim), kv = kv_rows(a, whole.head_dim);
  add_whole(store, l.attn_norm);
  if (l.qkv) {
    add_row_ranges(store, *l.qkv, fused_qkv_rows(a, whole));
  } else {
    add_rows(store, *l.q, q);
    add_rows(store, *l.k, kv);
    add_rows(store, *l.v, kv);
  }
  if (l.q_bias) {
    add_rows(store, *l.q_bias, q);
    add_rows(store, *l.k_bias, kv);
    add_rows(store, *l.v_bias, kv);
  }
  add_whole(store, l.q_norm);  // per head_dim: the same for every head
  add_whole(store, l.k_norm);
  add_columns(store, *l.o, q);
}

// The rank's routed experts (all, or its share) with their features (all, or its share), and
// the shared experts split by feature; the router and its bias replicated, so every rank routes
// every token alike.
void add_moe(TensorStore& store, const LayerTensors& l, const LayerShard& s) {
  add_whole(store, l.router);
  add_whole(store, l.expert_bias);
  for (int64_t e = s.experts.begin; e < s.experts.end(); ++e)
    add_ffn(store, l.experts[static_cast<size_t>(e)], s.expert_features);
  if (l.shared.gate) add_ffn(store, l.shared, s.shared_features);
}

}  // namespace

std::unique_ptr<Model> Model::shard(const Model& whole, const TensorParallelPlan& plan) {
  const ModelConfig& c = whole.config();
  if (plan.layers.size() != static_cast<size_t>(c.num_layers))
    fail("--tensor-parallel: the plan has ", plan.layers.size(), " layers, the model ",
         c.num_layers, " (internal error)");
  check_uniform(plan, c.moe);
  std::unique_ptr<Model> m(new Model());
  m->dir_ = whole.dir_;
  m->family_ = whole.family_;
  m->config_ = c;
  const LayerShard& first = plan.layers.front();
  m->config_.num_heads = first.attention.heads.count;
  m->config_.num_kv_heads = first.attention.kv_heads.count;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerShard& s = plan.layers[static_cast<size_t>(i)];
    if (c.moe.is_moe_layer(i)) {
      m->config_.moe.expert_intermediate_size = s.expert_features.count;
      m->config_.moe.first_held_expert = s.experts.begin;
      m->config_.moe.held_experts = s.experts.count;
      m->config_.moe.held_shared_features = s.shared_features.count;
    } else
      m->config_.intermediate_size = s.ffn_features.count;
  }

  const ModelTensors& t = whole.tensors();
  TensorStore& store = m->store_;
  add_whole(store, t.embed);
  add_whole(store, t.final_norm);
  if (plan.vocab.count == c.vocab_size) {  // a group of one: the whole head, tied as it was
    if (t.lm_head != t.embed) add_whole(store, t.lm_head);
  } else {  // the rank's vocabulary rows, under the LM head's name even where the whole is tied
    add_row_ranges(store, *t.lm_head, {plan.vocab},
                   whole.family().global_tensor(GlobalTensor::kLmHead));
    m->config_.tied_embeddings = false;
    m->lm_head_begin_ = plan.vocab.begin;
    m->lm_head_rows_ = plan.vocab.count;
  }
  const std::vector<LayerDesc> layers = describe_layers(c);
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const LayerTensors& l = t.layers[i];
    const LayerShard& s = plan.layers[i];
    add_attention(store, l, s.attention, layers[i].attention);
    add_whole(store, l.mlp_norm);
    if (l.router)
      add_moe(store, l, s);
    else
      add_ffn(store, {l.gate, l.up, l.down}, s.ffn_features);
  }
  m->config_.validate(whole.dir_.string() + " (tensor-parallel rank " + std::to_string(plan.rank) +
                      " of " + std::to_string(plan.world) + ")");
  m->resolve_tensors();
  return m;
}

}  // namespace dllm
