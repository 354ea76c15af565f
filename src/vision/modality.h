// The modality of a prompt token (vision-language prompts): what MMInference's modality-aware
// sparse prefill partitions the attention by.
#pragma once

#include <cstdint>

namespace dllm {

enum class Modality : uint8_t { kText = 0, kImage = 1, kVideo = 2 };

}  // namespace dllm
