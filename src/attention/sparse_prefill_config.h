// The sparse prefill config: which pattern every (layer, query head) runs (method-specs §2.7).
// Reads both published formats (microsoft/MInference):
//   MInference 1.0  [ {"0": ["vertical_and_slash", 1000, 6096, 0.96], ...}, ... ]  (one object per
//                   layer; "stream_llm" [n_init, n_local], "block_sparse" [top_k, _]; a trailing
//                   score is ignored)
//   MMInference     {"layer-0": {"0": ["grid_attn", stride, hline, vline, slash, local, shift],
//                                "1": ["a_shape", sink, local], "2": ["vs_attn", v, s, last_q],
//                                "3": ["shuffle_q", "vs_attn", v, s], ...}, ...}
//                   ("2d_shuffle", the name the published search's commented-out space gives the
//                   2D-boundary form, takes the same arguments)
// plus our own names: "dense", "tri_shape" [sink, local, n_last], "vertical_and_slash" [v, s],
// "block_sparse" [top_blocks]. Where the published runtime differs from its search output we
// follow the runtime: MMInference's "a_shape" runs as tri-shape whose dense rows are the text
// after the vision span (mminference_kernel); "shuffle_q" is the Q-boundary form. A grid stride of
// 0 is estimated online. A head missing from a listed layer runs MInference's default
// ("vertical_and_slash", 1000, 6096); a layer missing from the file runs dense.
// save_sparse_prefill_config writes the MMInference form.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/sparse_prefill_patterns.h"

namespace dllm {

struct SparsePrefillConfig {
  struct Layer {
    bool given = false;              // false: the layer runs dense
    std::vector<HeadPattern> heads;  // by query head
    std::vector<bool> head_given;    // false: the default vertical-slash (1000, 6096)
  };
  std::vector<Layer> layers;

  HeadPattern pattern(int layer, int head) const;
};

// What a prefill forward asks of the backend (SequenceForward::sparse_prefill): the config and the
// prompt's layout (modality per token and the vision span, empty / zero for text). The backend
// applies it to a prefill from position 0 with no visible cache entries, under the causal or
// block-causal rule; any other forward of the sequence attends densely.
struct SparsePrefillRequest {
  std::shared_ptr<const SparsePrefillConfig> config;
  std::vector<uint8_t> modality;
  int32_t vision_begin = 0, vision_end = 0, frame_stride = 0;
};

// `source` names the file in errors.
SparsePrefillConfig parse_sparse_prefill_config(const nlohmann::json& j, const std::string& source);
SparsePrefillConfig load_sparse_prefill_config(const std::filesystem::path& path);
nlohmann::json sparse_prefill_config_json(const SparsePrefillConfig& config);
void save_sparse_prefill_config(const SparsePrefillConfig& config,
                                const std::filesystem::path& path);

// Errors naming the layer or head when the config lists more layers or heads than the model has.
void check_config_fits(const SparsePrefillConfig& config, int layers, int heads,
                       const std::string& source);

}  // namespace dllm
