// Shared helpers of the vision tests: the SDAR-VL fixture (tools/make_sdar_vl_fixture.py) and
// comparisons.
#pragma once

#include <cmath>
#include <span>

#include "io/json_file.h"
#include "model/model.h"
#include "support/test_paths.h"
#include "vision/vision_model.h"

namespace dllm::test {

inline std::filesystem::path sdar_vl_fixture() {
  return model_fixture("sdar-vl-tiny");
}
inline nlohmann::json sdar_vl_reference() {
  return read_json_file(sdar_vl_fixture() / "reference.json");
}

// ‖ours − ref‖ / ‖ref‖
inline double rel_error(std::span<const float> ours, std::span<const float> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(ours[i]) - ref[i]) * (double(ours[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace dllm::test
