#include "model/model.h"

#include <algorithm>
#include <cmath>

#include <set>

#include "core/error.h"
#include "io/json_file.h"

namespace dllm {

namespace {

// Stop ids are the config's eos plus generation_config.json's eos_token_id (int or list).
void add_stop_ids(ModelConfig& c, const std::optional<nlohmann::json>& gen,
                  const std::string& gen_source) {
  std::vector<int64_t> ids;
  if (c.eos_token_id >= 0) ids.push_back(c.eos_token_id);
  if (gen && gen->contains("eos_token_id")) {
    const auto& e = (*gen)["eos_token_id"];
    auto add = [&](const nlohmann::json& v) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX))
        fail(gen_source, ": eos_token_id must hold integer token ids in 0..", INT32_MAX, " (got ",
             v.dump(), ")");
      ids.push_back(v.get<int64_t>());
    };
    if (e.is_array()) {
      for (const auto& v : e) add(v);
    } else if (!e.is_null()) {
      add(e);
    }
  }
  for (int64_t id : ids) {
    if (id < 0 || id >= c.vocab_size)
      fail(gen_source, ": stop token id ", id, " is outside the vocabulary (size ", c.vocab_size,
           ")");
    bool seen = false;
    for (int64_t s : c.stop_token_ids) seen = seen || s == id;
    if (!seen) c.stop_token_ids.push_back(id);
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) fail(dir.string(), ": not a model directory");
  const auto config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) fail(dir.string(), ": no config.json");
  const nlohmann::json config = read_json_file(config_path);
  if (!config.is_object()) fail(config_path.string(), ": not a JSON object");

  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->family_ = &find_family(config, config_path.string());
  m->config_ = m->family_->parse_config(config, config_path.string());
  const auto gen_path = dir / "generation_config.json";
  add_stop_ids(m->config_, read_json_file_if_exists(gen_path), gen_path.string());
  m->config_.validate(config_path.string());
  m->store_ = TensorStore::open(dir);
  m->resolve_tensors();
  return m;
}

std::unique_ptr<Model> Model::from_parts(const nlohmann::json& config, TensorStore store,
                                         std::string source) {
  std::unique_ptr<Model> m(new Model());
  m->family_ = &find_family(config, source);
  m->config_ = m->family_->parse_config(config, source);
  add_stop_ids(m->config_, std::nullopt, source);
  m->config_.validate(source);
  m->store_ = std::move(store);
  m->resolve_tensors();
  return m;
}

void Model::resolve_tensors() {
  const ModelConfig& c = config_;
  auto want = [&](const std::string& name, const std::vector<int64_t>& shape) {
    return store_.get_weight(name, shape);
  };
  const int64_t h = c.hidden_size;
  tensors_.embed = want(family_->global_tensor(GlobalTensor::kEmbed), {c.vocab_size, h});
  tensors_.final_norm = want(family_->global_tensor(GlobalTensor::kFinalNorm), {h});
  const int64_t head_rows = lm_head_rows_ < 0 ? c.vocab_size : lm_head_rows_;
  tensors_.lm_head = c.tied_embeddings
                         ? tensors_.embed
                         : want(family_->global_tensor(GlobalTensor::kLmHead), {head_rows, h});
  tensors_.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerTensors& l = tensors_.layers[static_cast<size_t>(i)];
    auto name = [&](LayerTensor t) { return family_->layer_tensor(i, t); };
    l.attn_norm = want(name(LayerTensor::kAttnNorm), {h});
    if (c.fused_qkv) {
      l.qkv = want(name(LayerTensor::kQkv), {c.q_dim() + 2 * c.kv_dim(), h});
    } else {
      l.q = want(name(LayerTensor::kQ), {c.q_dim(), h});
      l.k = want(name(LayerTensor::kK), {c.kv_dim(), h});
      l.v = want(name(LayerTensor::kV), {c.kv_dim(), h});
    }
    l.o = want(name(LayerTensor::kO), {h, c.q_dim()});
    if (c.qkv_bias) {
      l.q_bias = want(name(LayerTensor::kQBias), {c.q_dim()});
      l.k_bias = want(name(LayerTensor::kKBias), {c.kv_dim()});
      l.v_bias = want(name(LayerTensor::kVBias), {c.kv_dim()});
    }
    if (c.qk_norm) {
      l.q_norm = want(name(LayerTensor::kQNorm), {c.head_dim});
      l.k_norm = want(name(LayerTensor::kKNorm), {c.head_dim});
    }
    l.mlp_norm = want(name(LayerTensor::kMlpNorm), {h});
    if (!c.moe.is_moe_layer(i)) {
      l.gate = want(name(LayerTensor::kGate), {c.intermediate_size, h});
      l.up = want(name(LayerTensor::kUp), {c.intermediate_size, h});
      l.down = want(name(LayerTensor::kDown), {h, c.intermediate_size});
      continue;
    }
    const MoeConfig& m = c.moe;
    l.router = want(name(LayerTensor::kRouter), {m.num_experts, h});
    if (m.expert_bias) l.expert_bias = want(name(LayerTensor::kExpertBias), {m.num_experts});
    const int64_t ie = m.expert_intermediate_size;
    for (int64_t e = m.first_held_expert; e < m.first_held_expert + m.held_count(); ++e) {
      auto expert = [&](LayerTensor t) { return family_->expert_tensor(i, e, t); };
      l.experts.push_back({want(expert(LayerTensor::kGate), {ie, h}),
                           want(expert(LayerTensor::kUp), {ie, h}),
                           want(expert(LayerTensor::kDown), {h, ie})});
    }
    if (const int64_t is = m.shared_intermediate_size(); is > 0)
      l.shared = {want(name(LayerTensor::kSharedGate), {is, h}),
                  want(name(LayerTensor::kSharedUp), {is, h}),
                  want(name(LayerTensor::kSharedDown), {h, is})};
  }
}

namespace {
template <class F>
void for_each_used(const ModelTensors& t, F f) {
  std::set<const TensorEntry*> seen;
  auto visit = [&](const TensorEntry* e) {
    if (e && seen.insert(e).second) f(*e);
  };
  visit(t.embed);
  visit(t.final_norm);
  visit(t.lm_head);
  for (const auto& l : t.layers) {
    for (const TensorEntry* e :
         {l.attn_norm, l.qkv,    l.q,           l.k,           l.v,         l.o,          l.q_bias,
          l.k_bias,    l.v_bias, l.q_norm,      l.k_norm,      l.mlp_norm,  l.gate,       l.up,
          l.down,      l.router, l.expert_bias, l.shared.gate, l.shared.up, l.shared.down})
      visit(e);
    for (const FfnTensors& x : l.experts)
      for (const TensorEntry* e : {x.gate, x.up, x.down}) visit(e);
  }
}
}  // namespace

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for_each_used(tensors_, [&](const TensorEntry& e) { n += e.numel(); });
  return n;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for_each_used(tensors_, [&](const TensorEntry& e) { n += e.nbytes; });
  return n;
}

namespace {
// Parameters of one MoE layer's routed experts held (gate, up and down of each).
double routed_expert_parameters(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  return double(m.held_count()) * 3.0 * double(c.hidden_size) * double(m.expert_intermediate_size);
}
int64_t moe_layers(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) n += c.moe.is_moe_layer(l) ? 1 : 0;
  return n;
}
}  // namespace

double Model::parameters_read(int64_t rows, std::optional<double> experts_touched) const {
  const MoeConfig& m = config_.moe;
  const double all = double(parameter_count());
  if (m.num_experts <= 0) return all;
  const double picked = double(m.experts_per_token) / double(m.num_experts);
  const double touched =  // the fraction of each MoE layer's routed experts read
      experts_touched ? std::clamp(*experts_touched / double(m.num_experts), 0.0, 1.0)
                      : 1.0 - std::pow(1.0 - picked, double(std::max<int64_t>(rows, 0)));
  return all - double(moe_layers(config_)) * routed_expert_parameters(config_) * (1.0 - touched);
}

double Model::parameters_per_row() const {
  return parameters_read(1);  // one row reads exactly the k experts it multiplies by
}

std::vector<std::string> Model::unused_tensors() const {
  std::set<std::string> used;
  for_each_used(tensors_, [&](const TensorEntry& e) { used.insert(e.name); });
  std::vector<std::string> out;
  for (const TensorEntry* e : store_.all())
    if (!used.count(e->name)) out.push_back(e->name);
  return out;
}

}  // namespace dllm
