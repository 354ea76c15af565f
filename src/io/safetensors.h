// safetensors reader: one file (SafetensorsFile) or a whole checkpoint directory, single-file or
// sharded through model.safetensors.index.json (TensorStore).
//
// Every header field is validated before any tensor byte is touched: header length, JSON shape,
// dtype, shape × dtype size == byte length, offsets inside the file, no overlapping ranges. A
// corrupt, truncated or hostile file gives an Error naming the file (and the tensor), never an
// out-of-bounds read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/host_tensor.h"
#include "io/mapped_file.h"

namespace dllm {

struct TensorEntry {
  std::string name;
  std::string dtype_name;      // as written in the header ("BF16", "I64", ...)
  std::optional<DType> dtype;  // set when it is one we compute with (BF16, F16, F32)
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;  // inside the file mapping
  size_t nbytes = 0;
  std::string file;  // path of the file holding it, for error messages

  int64_t numel() const { return HostTensor::count(shape); }
};

// An fp32 copy of a tensor's values in its shape (the CPU backends compute in fp32); an empty
// tensor for nullptr (an optional weight the checkpoint lacks).
HostTensor to_f32(const TensorEntry* t);

// The tensors and metadata a safetensors image (length, JSON header, data) describes; entries
// point into `bytes`. Validates everything (see above); errors name `name`. SafetensorsFile uses
// it on a mapped file; the fuzzer (fuzz/) on raw bytes.
struct SafetensorsIndex {
  std::vector<TensorEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
};
SafetensorsIndex parse_safetensors(const unsigned char* bytes, size_t size,
                                   const std::string& name);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);  // maps and validates

  const std::string& path() const { return file_.path(); }
  const TensorEntry* find(std::string_view name) const;
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::vector<TensorEntry> tensors_;  // sorted by name
  std::map<std::string, std::string> metadata_;
};

// All tensors of one checkpoint, by name, across shards.
class TensorStore {
 public:
  // `dir` holds model.safetensors.index.json (sharded) or model.safetensors, or exactly one
  // *.safetensors file. A path to a single .safetensors file also works.
  static TensorStore open(const std::filesystem::path& path);

  const TensorEntry* find(std::string_view name) const;
  const TensorEntry& get(std::string_view name) const;  // Error naming the checkpoint if absent
  // get() of a weight whose shape config.json fixes and whose dtype the backends read (BF16,
  // F16, F32): an Error naming the file and tensor otherwise.
  const TensorEntry* get_weight(std::string_view name, const std::vector<int64_t>& shape) const;
  std::vector<const TensorEntry*> all() const;  // sorted by name
  size_t total_bytes() const;
  const std::string& source() const { return source_; }
  size_t num_files() const { return files_.size(); }

  // Adds a tensor whose bytes the store owns (random-weight models for benchmarks and tests).
  void add_owned(std::string name, DType dtype, std::vector<int64_t> shape,
                 std::vector<unsigned char> bytes);
  // Adds a tensor whose bytes live elsewhere: in `owner`, which the store keeps alive, or, with
  // no owner, in memory the caller keeps alive as long as the store (a tensor-parallel rank's
  // rows of the whole model's tensor).
  void add_view(std::string name, DType dtype, std::vector<int64_t> shape,
                const unsigned char* data, std::shared_ptr<const void> owner = nullptr);

  // Reads a tensor as fp32, checking its shape.
  HostTensor load_f32(std::string_view name, const std::vector<int64_t>& expected_shape) const;

 private:
  std::string source_;  // the directory or file the user named
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // Adds an in-memory tensor's entry (its bytes in `owned` or, when that is empty, at `data`).
  void add_in_memory(std::string name, DType dtype, std::vector<int64_t> shape,
                     std::vector<unsigned char> owned, const unsigned char* data, size_t nbytes);

  std::vector<std::unique_ptr<std::pair<TensorEntry, std::vector<unsigned char>>>> owned_;
  std::vector<std::shared_ptr<const void>> view_owners_;
  std::map<std::string, const TensorEntry*, std::less<>> by_name_;
};

}  // namespace dllm
