// LLaDA-8B / LLaDA 1.5 (GSAI-ML): OLMo-derived config dialect (d_model, n_layers, ...), Llama
// blocks with their own tensor names, fully bidirectional, position-aligned logits, mask 126336.
// model-specs §4.
#include <cmath>

#include "core/error.h"
#include "model/families/config_reader.h"

namespace dllm {
namespace {

ModelConfig parse_llada(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ModelConfig c;
  read_common_fields(r, c);
  c.family = "llada";
  c.hidden_size = r.get_int("d_model");
  c.num_layers = r.get_int("n_layers");
  c.num_heads = r.get_int("n_heads");
  c.num_kv_heads = r.get_int("n_kv_heads", c.num_heads);
  c.head_dim = c.hidden_size / c.num_heads;
  if (r.has("mlp_hidden_size")) {
    c.intermediate_size = r.get_int("mlp_hidden_size");
  } else {
    c.intermediate_size =
        static_cast<int64_t>(r.get_double("mlp_ratio", 4.0) * static_cast<double>(c.hidden_size));
  }
  // The embedding (and the LM head) may be padded beyond vocab_size to embedding_size.
  c.vocab_size = r.get_int("embedding_size", r.get_int("vocab_size"));
  read_context_limit(r, "max_sequence_length", c);
  c.rope_theta = r.get_double("rope_theta", 10000.0);
  c.partial_rotary_factor = 1.0;
  c.rotary_dim = c.head_dim;
  c.norm_eps = r.get_double("rms_norm_eps", 1e-5);
  c.tied_embeddings = r.get_bool("weight_tying", false);
  c.qk_norm = false;
  c.qkv_bias = false;

  // Variants of the OLMo code that LLaDA's released checkpoints never use: refuse them clearly.
  if (r.get_string("block_type", "llama") != "llama")
    r.unsupported("block_type", "block type other than 'llama'");
  if (r.get_string("layer_norm_type", "rms") != "rms")
    r.unsupported("layer_norm_type", "norm other than 'rms'");
  if (r.get_string("activation_type", "silu") != "silu")
    r.unsupported("activation_type", "activation other than silu");
  if (!r.get_bool("rope", true)) r.unsupported("rope", "absolute (non-RoPE) positions");
  if (r.get_bool("include_bias", false)) r.unsupported("include_bias", "linear biases");
  if (r.get_bool("include_qkv_bias", false)) r.unsupported("include_qkv_bias", "q/k/v biases");
  if (r.get_bool("attention_layer_norm", false))
    r.unsupported("attention_layer_norm", "q/k layer norm");
  if (r.get_bool("input_emb_norm", false)) r.unsupported("input_emb_norm", "embedding norm");
  if (r.get_bool("scale_logits", false)) r.unsupported("scale_logits", "logit scaling");

  c.attention = AttentionKind::kBidirectional;
  c.block_size = 0;
  c.shifted_logits = false;
  c.mask_token_id = r.get_token_id("mask_token_id", 126336);
  c.eos_token_id = r.get_token_id("eos_token_id", 126081);
  c.pad_token_id = r.get_token_id("pad_token_id", -1);
  c.bos_token_id = r.get_token_id("bos_token_id", -1);
  // <|eot_id|>: LLaDA's generate.py hard-codes 126348; config.json may name another.
  c.eot_token_id = r.get_token_id("eot_token_id", c.vocab_size > 126348 ? 126348 : -1);
  return c;
}

std::string llada_global_tensor(GlobalTensor t) {
  switch (t) {
    case GlobalTensor::kEmbed:
      return "model.transformer.wte.weight";
    case GlobalTensor::kFinalNorm:
      return "model.transformer.ln_f.weight";
    case GlobalTensor::kLmHead:
      return "model.transformer.ff_out.weight";
  }
  return "";
}

std::string llada_layer_tensor(int64_t layer, LayerTensor t) {
  const std::string p = "model.transformer.blocks." + std::to_string(layer) + ".";
  switch (t) {
    case LayerTensor::kAttnNorm:
      return p + "attn_norm.weight";
    case LayerTensor::kQ:
      return p + "q_proj.weight";
    case LayerTensor::kK:
      return p + "k_proj.weight";
    case LayerTensor::kV:
      return p + "v_proj.weight";
    case LayerTensor::kO:
      return p + "attn_out.weight";
    case LayerTensor::kMlpNorm:
      return p + "ff_norm.weight";
    case LayerTensor::kGate:
      return p + "ff_proj.weight";
    case LayerTensor::kUp:
      return p + "up_proj.weight";
    case LayerTensor::kDown:
      return p + "ff_out.weight";
    default:
      return "";  // LLaDA has no biases and no q/k norms
  }
}

}  // namespace

const Family kLladaFamily{
    .name = "llada",
    .description =
        "LLaDA full diffusion (Llama-style blocks, bidirectional, position-aligned logits)",
    .model_types = {"llada"},
    .architectures = {"LLaDAModelLM"},
    .unsupported = "",
    .parse_config = parse_llada,
    .global_tensor = llada_global_tensor,
    .layer_tensor = llada_layer_tensor,
};

}  // namespace dllm
