// libFuzzer: the safetensors parser on arbitrary bytes (length prefix, JSON header, offsets).
// Any dllm::Error is a clean refusal; anything else (crash, sanitizer report, other exception)
// is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const dllm::SafetensorsIndex index = dllm::parse_safetensors(data, size, "fuzz.safetensors");
    // Touch every accepted byte range: it must lie inside the input.
    volatile unsigned char sink = 0;
    for (const dllm::TensorEntry& t : index.tensors)
      if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  } catch (const dllm::Error&) {
  }
  return 0;
}
