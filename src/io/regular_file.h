// Opening a file a user named (checkpoint shard, config, tokenizer, template, messages) without
// trusting what is there: the open never blocks (O_NONBLOCK, so a FIFO with no writer cannot hang
// the process) and anything but a regular file (FIFO, socket, device, directory) is refused with
// an error naming the path and what it is.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace dllm {

class RegularFile {
 public:
  explicit RegularFile(const std::filesystem::path& path);  // throws Error naming the path
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads the whole file (size() bytes, re-checked against what read() delivers).
  std::string read_all() const;

 private:
  std::string path_;
  int fd_ = -1;
  size_t size_ = 0;
};

}  // namespace dllm
