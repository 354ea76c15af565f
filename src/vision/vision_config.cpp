// Reads the vision side of an SDAR-VL checkpoint (config.json's top level and vision_config, and
// preprocessor_config.json), with errors that name the file and the field.
#include "vision/vision_config.h"

#include "core/error.h"
#include "model/families/config_reader.h"

namespace dllm {
namespace {

const nlohmann::json& nested_object(const ConfigReader& r, const char* key) {
  if (!r.has(key) || !r.json()[key].is_object())
    fail(r.source(), ": field '", key, "' must be an object (the ", key, " of an sdar_v model)");
  return r.json()[key];
}

void check_range(const std::string& source, const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    fail(source, ": field '", field, "' is ", v, ", outside the accepted range ", lo, "..", hi);
}

// vision_config: SigLIP as transformers' SiglipVisionConfig spells it.
void read_vision_tower(const ConfigReader& v, VisionConfig& vc) {
  vc.image_size = v.get_int("image_size", 384);
  vc.patch_size = v.get_int("patch_size", 14);
  vc.num_channels = v.get_int("num_channels", 3);
  vc.hidden_size = v.get_int("hidden_size", 768);
  vc.intermediate_size = v.get_int("intermediate_size", 3072);
  vc.num_layers = v.get_int("num_hidden_layers", 12);
  vc.num_heads = v.get_int("num_attention_heads", 12);
  vc.layer_norm_eps = v.get_double("layer_norm_eps", 1e-6);
  check_range(v.source(), "image_size", vc.image_size, 1, 4096);
  check_range(v.source(), "patch_size", vc.patch_size, 1, vc.image_size);
  // 384 / 14: the patch convolution (stride 14, no padding) covers 27 patches and drops the
  // last 6 pixels, as SigLIP does.
  if (vc.num_channels != 3) v.unsupported("num_channels", std::to_string(vc.num_channels));
  if (vc.hidden_size % vc.num_heads != 0)
    fail(v.source(), ": hidden_size ", vc.hidden_size, " is not a multiple of num_attention_heads ",
         vc.num_heads);
  if (!(vc.layer_norm_eps > 0) || !(vc.layer_norm_eps < 1))
    fail(v.source(), ": field 'layer_norm_eps' is ", vc.layer_norm_eps,
         ", outside the accepted range (0, 1)");
  const std::string act = v.get_string("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") v.unsupported("hidden_act", "activation '" + act + "'");
  if (v.get_bool("vision_use_head", true))
    v.unsupported("vision_use_head", "the attention-pooling head (true)");
}

std::vector<std::pair<int64_t, int64_t>> read_pinpoints(const ConfigReader& r, int64_t crop) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto& p = r.json().value("image_grid_pinpoints", nlohmann::json::array());
  if (!p.is_array() || p.empty())
    fail(r.source(), ": field 'image_grid_pinpoints' must be a non-empty list of [height, width]");
  for (const auto& hw : p) {
    if (!hw.is_array() || hw.size() != 2 || !hw[0].is_number_integer() ||
        !hw[1].is_number_integer())
      fail(r.source(), ": image_grid_pinpoints entry ", hw.dump(), " is not [height, width]");
    const int64_t h = hw[0].get<int64_t>(), w = hw[1].get<int64_t>();
    // Each pinpoint is tiled into crops of image_size: it must be a whole grid of them.
    if (h < crop || w < crop || h % crop || w % crop || h > 64 * crop || w > 64 * crop)
      fail(r.source(), ": image_grid_pinpoints entry ", hw.dump(),
           " must be multiples of the crop size ", crop, " (1 to 64 crops a side)");
    out.emplace_back(h, w);
  }
  return out;
}

VisionConfig read_vision(const ConfigReader& r, const ModelConfig& text) {
  VisionConfig vc;
  read_vision_tower(
      ConfigReader(nested_object(r, "vision_config"), r.source() + " (vision_config)"), vc);
  vc.text_hidden_size = text.hidden_size;
  vc.feature_layer = r.has("vision_feature_layer") ? r.get_int("vision_feature_layer") : -1;
  if (vc.feature_layer < -(vc.num_layers + 1) || vc.feature_layer > vc.num_layers ||
      vc.layers_to_run() < 1)
    fail(r.source(), ": field 'vision_feature_layer' is ", vc.feature_layer,
         ", outside the accepted range ", -vc.num_layers, "..", vc.num_layers,
         " (a layer of the tower, not the embeddings)");
  const std::string select = r.get_string("vision_feature_select_strategy", "full");
  if (select != "full") r.unsupported("vision_feature_select_strategy", "'" + select + "'");
  const std::string act = r.get_string("projector_hidden_act", "gelu");
  if (act != "gelu") r.unsupported("projector_hidden_act", "activation '" + act + "'");
  vc.projector_bias = r.get_bool("multimodal_projector_bias", true);
  vc.use_image_newline = r.get_bool("use_image_newline_parameter", true);
  if (!vc.use_image_newline)
    r.unsupported("use_image_newline_parameter", "a model without image_newline (false)");
  vc.image_token_id = r.get_token_id("image_token_index", 151646);
  vc.video_token_id = r.get_token_id("video_token_index", 151647);
  vc.grid_pinpoints = read_pinpoints(r, vc.image_size);
  // "anyres_max_9": transformers strips the characters of "anyres_max_" from both ends.
  const std::string aspect = r.get_string("vision_aspect_ratio", "anyres_max_9");
  const std::string prefix = "anyres_max_";
  if (aspect.rfind(prefix, 0) != 0 || aspect.size() == prefix.size() ||
      aspect.find_first_not_of("0123456789", prefix.size()) != std::string::npos ||
      aspect.size() > prefix.size() + 3)
    r.unsupported("vision_aspect_ratio", "'" + aspect + "' (anyres_max_N is)");
  vc.max_num_patches = std::stoll(aspect.substr(prefix.size()));
  if (vc.max_num_patches < 1) r.unsupported("vision_aspect_ratio", "'" + aspect + "'");
  for (auto [id, field] : {std::pair{vc.image_token_id, "image_token_index"},
                           std::pair{vc.video_token_id, "video_token_index"}})
    if (id < 0 || id >= text.vocab_size)
      fail(r.source(), ": ", field, " ", id, " is outside the vocabulary (size ", text.vocab_size,
           ")");
  return vc;
}

}  // namespace

VisionConfig read_vision_config(const nlohmann::json& config, const ModelConfig& text,
                                const std::string& source) {
  return read_vision(ConfigReader(config, source), text);
}

void read_preprocessor_config(VisionConfig& vc, const nlohmann::json& pre,
                              const std::string& source) {
  if (!pre.is_object()) fail(source, ": not a JSON object");
  auto triple = [&](const char* key, std::array<float, 3>& out) {
    if (!pre.contains(key) || pre[key].is_null()) return;
    const auto& v = pre[key];
    if (v.is_number()) {
      out.fill(v.get<float>());
      return;
    }
    if (!v.is_array() || v.size() != 3 || !v[0].is_number() || !v[1].is_number() ||
        !v[2].is_number())
      fail(source, ": field '", key, "' must be a number or a list of 3 numbers");
    for (size_t i = 0; i < 3; ++i) out[i] = v[i].get<float>();
  };
  triple("image_mean", vc.image_mean);
  triple("image_std", vc.image_std);
  for (float s : vc.image_std)
    if (!(s > 0)) fail(source, ": field 'image_std' must hold positive numbers");
  if (pre.contains("rescale_factor") && !pre["rescale_factor"].is_null()) {
    if (!pre["rescale_factor"].is_number() || !(pre["rescale_factor"].get<double>() > 0))
      fail(source, ": field 'rescale_factor' must be a positive number");
    vc.rescale_factor = pre["rescale_factor"].get<double>();
  }
  // The only resampling filter implemented is PIL's BICUBIC (3), what SDAR-VL ships.
  if (pre.contains("resample") && pre["resample"] != 3)
    fail(source, ": field 'resample' is ", pre["resample"].dump(),
         "; only 3 (bicubic) is supported");
}

}  // namespace dllm
