// dllm bench --video / --images: the vision side of a vision-language shape end to end on random
// weights, through the engine's own functions — frames decoded (FFmpeg, or a directory of image
// files), preprocessed (the LLaVA-OneVision processor), encoded (SigLIP + projector), packed
// into the prompt (build_vision_prompt), and the ~frames x 196 + text prompt prefilled into a
// KV cache by the backend; images/s for whole images (anyres crops) the same way.
//   dllm bench --device cuda --shape configs/sdar-vl-8b.json --video FRAMES_DIR --frames 64
//              --images 16 --reps 3 --json vl.json
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/bench_args.h"

namespace dllm::cli {

// One JSON object (the fields tools/bench_vl_torch.py writes too, so that
// tools/bench_vl_gpu.sh can put the two side by side).
nlohmann::json vision_bench(const BenchArgs& a, const std::string& device);

}  // namespace dllm::cli
