#include <algorithm>

#include "core/error.h"
#include "model/families/family.h"
#include "model/families/sdar_vl.h"

namespace dllm {

const std::vector<const Family*>& all_families() {
  static const std::vector<const Family*> families = {
      &kSdarFamily,  &kWedlmFamily,     &kFastDllmV2Family, &kDreamFamily,
      &kLladaFamily, &kLlada2MoeFamily, &kSdarVlFamily};
  return families;
}

const Family& find_family(const nlohmann::json& config, const std::string& source) {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  std::string model_type, arch;
  if (config.contains("model_type") && config["model_type"].is_string())
    model_type = config["model_type"];
  if (config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string())
    arch = config["architectures"][0];

  const Family* found = nullptr;
  for (const Family* f : all_families())
    if (!model_type.empty() && contains(f->model_types, model_type)) found = f;
  if (!found)
    for (const Family* f : all_families())
      if (!arch.empty() && contains(f->architectures, arch)) found = f;
  if (!found) {
    std::string known;
    for (const Family* f : all_families()) {
      if (!f->unsupported.empty()) continue;
      known += (known.empty() ? "" : ", ") + f->model_types.front();
    }
    fail(source, ": unknown architecture (model_type '", model_type, "', architectures[0] '", arch,
         "'); supported model types: ", known);
  }
  if (!found->unsupported.empty()) fail(source, ": ", found->unsupported);
  return *found;
}

}  // namespace dllm
