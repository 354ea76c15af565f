// SDAR-VL (JetAstra/SDAR-VL; JetLM/SDAR-VL-Instruct-4B/8B): LLaVA-OneVision layout around an SDAR
// language model. model-specs §7. config.json holds the SDAR config under text_config and the
// SigLIP tower under vision_config; tensors are vision_tower.vision_model.*,
// multi_modal_projector.linear_{1,2}, image_newline and language_model.{model.*, lm_head}. This
// family is the language model; src/vision/vision_model.h reads the vision side of the same
// checkpoint.
#include "model/families/sdar_vl.h"

#include "core/error.h"
#include "model/families/config_reader.h"

namespace dllm {
namespace {

const nlohmann::json& text_config(const ConfigReader& r) {
  if (!r.has("text_config") || !r.json()["text_config"].is_object())
    fail(r.source(),
         ": field 'text_config' must be an object (the SDAR config of an sdar_v model)");
  return r.json()["text_config"];
}

ModelConfig parse_sdar_vl(const nlohmann::json& j, const std::string& source) {
  ConfigReader r(j, source);
  ConfigReader t(text_config(r), source + " (text_config)");
  ModelConfig c;
  // The language model is SDAR (family "sdar"): every decoder and default keyed on the family
  // applies as is; model_type "sdar_v" tells the vision side (VisionModel::load) apart.
  read_sdar_config(t, c);
  read_common_fields(r, c);  // model_type sdar_v, the LLaVA-OneVision architecture
  return c;
}

std::string sdar_vl_global_tensor(GlobalTensor t) {
  return "language_model." + qwen_global_tensor(t);
}
std::string sdar_vl_layer_tensor(int64_t layer, LayerTensor t) {
  return "language_model." + qwen_layer_tensor(layer, t);
}

}  // namespace

const Family kSdarVlFamily{
    .name = "sdar_v",
    .description =
        "SDAR-VL: SigLIP vision tower + MLP projector + SDAR block diffusion "
        "(LLaVA-OneVision layout)",
    .model_types = {"sdar_v"},
    .architectures = {},  // LlavaOnevisionForConditionalGeneration alone does not say SDAR
    .unsupported = "",
    .parse_config = parse_sdar_vl,
    .global_tensor = sdar_vl_global_tensor,
    .layer_tensor = sdar_vl_layer_tensor,
};

}  // namespace dllm
