#include "support/random_checkpoint.h"

#include <fstream>

#include "model/random_model.h"
#include "support/safetensors_writer.h"

namespace dllm::test {

void write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::json& config,
                             uint64_t seed) {
  std::filesystem::create_directories(dir);
  auto model = make_random_model(config, seed);
  std::vector<RawTensor> tensors;
  for (const TensorEntry* t : model->store().all())
    tensors.push_back(RawTensor{t->name, t->dtype_name, t->shape,
                                std::vector<unsigned char>(t->data, t->data + t->nbytes)});
  write_file(dir / "model.safetensors", safetensors_bytes(tensors));
  std::ofstream(dir / "config.json") << config.dump(2);
}

}  // namespace dllm::test
