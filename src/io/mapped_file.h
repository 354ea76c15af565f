// Read-only memory mapping of a whole file (RAII). Checkpoints are mapped, never read into memory
// up front: the OS pages in only the tensors that are used.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace dllm {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws Error naming the file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dllm
