#include "model/random_model.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include <unistd.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace dllm {

namespace {

// splitmix64: a tiny counter-based generator, so each tensor's values depend only on (seed, name).
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// n random bf16 values. The buffer is not zeroed first: its pages are first touched by the
// parallel fill, so the kernel's page zeroing runs on every thread (a zeroing std::vector spent
// half of a 2.3 B-parameter set-up in one thread's memset).
std::shared_ptr<const unsigned char[]> random_bf16(int64_t n, uint64_t key, float center,
                                                   float scale) {
  std::shared_ptr<unsigned char[]> bytes(new unsigned char[static_cast<size_t>(n) * 2]);
  unsigned char* out = bytes.get();
  parallel_for(
      n,
      [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) {
          // Uniform in [-sqrt(3), sqrt(3)]: unit variance, cheap.
          const double u =
              static_cast<double>(splitmix(key ^ static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
          const float v = center + scale * static_cast<float>((u * 2.0 - 1.0) * 1.7320508075688772);
          const uint16_t b = f32_to_bf16(v);
          std::memcpy(out + static_cast<size_t>(i) * 2, &b, 2);
        }
      },
      65536);
  return bytes;
}

double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double distinct_weight_bytes(const ModelConfig& c) {
  return static_cast<double>(c.weight_elements()) * 2.0;  // bf16
}

// Random weights live in memory (bf16): refuse up front a shape that cannot fit, instead of
// failing with bad_alloc (or being killed) half way through.
void check_fits_in_memory(const ModelConfig& c) {
  const double bytes = distinct_weight_bytes(c);
  const double physical = physical_memory_bytes();
  if (physical > 0 && bytes > physical)
    fail("<random model config>: random bf16 weights need ", bytes / (1 << 30),
         " GiB but this machine has ", physical / (1 << 30), " GiB of memory");
}

}  // namespace

bool random_weights_fit_in_memory(const nlohmann::json& config) {
  const Family& family = find_family(config, "<random model config>");
  const ModelConfig c = family.parse_config(config, "<random model config>");
  const double physical = physical_memory_bytes();
  return physical <= 0 || distinct_weight_bytes(c) <= physical / 2;
}

std::unique_ptr<Model> make_random_model(const nlohmann::json& config, uint64_t seed,
                                         const std::function<void(const AddRandomTensor&)>& extra,
                                         RandomWeightStorage storage) {
  const Family& family = find_family(config, "<random model config>");
  const ModelConfig c = family.parse_config(config, "<random model config>");
  c.validate("<random model config>");
  const bool shared = storage == RandomWeightStorage::kSharedByShape;
  if (!shared) check_fits_in_memory(c);
  TensorStore store;
  std::map<std::tuple<std::vector<int64_t>, float, float>, std::shared_ptr<const unsigned char[]>>
      by_kind;  // kSharedByShape: the buffer of each (shape, center, scale)
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center, float scale) {
    if (name.empty()) return;
    const uint64_t key = splitmix(seed ^ std::hash<std::string>{}(name));
    std::shared_ptr<const unsigned char[]> bytes;
    if (shared) {
      auto& buffer = by_kind[{shape, center, scale}];
      if (!buffer) buffer = random_bf16(HostTensor::count(shape), key, center, scale);
      bytes = buffer;
    } else {
      bytes = random_bf16(HostTensor::count(shape), key, center, scale);
    }
    const unsigned char* data = bytes.get();
    store.add_view(name, DType::kBF16, std::move(shape), data, std::move(bytes));
  };
  const int64_t h = c.hidden_size;
  const float inv_h = 1.0f / std::sqrt(static_cast<float>(h));
  add(family.global_tensor(GlobalTensor::kEmbed), {c.vocab_size, h}, 0.0f, 1.0f);
  add(family.global_tensor(GlobalTensor::kFinalNorm), {h}, 1.0f, 0.1f);
  if (!c.tied_embeddings)
    add(family.global_tensor(GlobalTensor::kLmHead), {c.vocab_size, h}, 0.0f, inv_h);
  auto add_ffn = [&](const std::string& gate, const std::string& up, const std::string& down,
                     int64_t inter) {
    add(gate, {inter, h}, 0.0f, inv_h);
    add(up, {inter, h}, 0.0f, inv_h);
    add(down, {h, inter}, 0.0f, 1.0f / std::sqrt(static_cast<float>(inter)));
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto name = [&](LayerTensor t) { return family.layer_tensor(i, t); };
    add(name(LayerTensor::kAttnNorm), {h}, 1.0f, 0.1f);
    if (c.fused_qkv) {
      add(name(LayerTensor::kQkv), {c.q_dim() + 2 * c.kv_dim(), h}, 0.0f, inv_h);
    } else {
      add(name(LayerTensor::kQ), {c.q_dim(), h}, 0.0f, inv_h);
      add(name(LayerTensor::kK), {c.kv_dim(), h}, 0.0f, inv_h);
      add(name(LayerTensor::kV), {c.kv_dim(), h}, 0.0f, inv_h);
    }
    add(name(LayerTensor::kO), {h, c.q_dim()}, 0.0f,
        1.0f / std::sqrt(static_cast<float>(c.q_dim())));
    if (c.qkv_bias) {
      add(name(LayerTensor::kQBias), {c.q_dim()}, 0.0f, 0.1f);
      add(name(LayerTensor::kKBias), {c.kv_dim()}, 0.0f, 0.1f);
      add(name(LayerTensor::kVBias), {c.kv_dim()}, 0.0f, 0.1f);
    }
    if (c.qk_norm) {
      add(name(LayerTensor::kQNorm), {c.head_dim}, 1.0f, 0.1f);
      add(name(LayerTensor::kKNorm), {c.head_dim}, 1.0f, 0.1f);
    }
    add(name(LayerTensor::kMlpNorm), {h}, 1.0f, 0.1f);
    if (!c.moe.is_moe_layer(i)) {
      add_ffn(name(LayerTensor::kGate), name(LayerTensor::kUp), name(LayerTensor::kDown),
              c.intermediate_size);
      continue;
    }
    const MoeConfig& m = c.moe;
    add(name(LayerTensor::kRouter), {m.num_experts, h}, 0.0f, inv_h);
    if (m.expert_bias) add(name(LayerTensor::kExpertBias), {m.num_experts}, 0.0f, 0.01f);
    for (int64_t e = 0; e < m.num_experts; ++e) {
      auto expert = [&](LayerTensor t) { return family.expert_tensor(i, e, t); };
      add_ffn(expert(LayerTensor::kGate), expert(LayerTensor::kUp), expert(LayerTensor::kDown),
              m.expert_intermediate_size);
    }
    if (m.shared_intermediate_size() > 0)
      add_ffn(name(LayerTensor::kSharedGate), name(LayerTensor::kSharedUp),
              name(LayerTensor::kSharedDown), m.shared_intermediate_size());
  }
  if (extra) extra(add);
  return Model::from_parts(config, std::move(store), "<random model config>");
}

}  // namespace dllm
