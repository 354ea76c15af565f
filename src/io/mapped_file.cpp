#include "io/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/regular_file.h"

namespace dllm {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
  const RegularFile file(path);  // never blocks; refuses FIFOs, devices and directories
  size_ = file.size();
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) fail(path_, ": cannot mmap: ", std::strerror(errno));
    data_ = static_cast<const unsigned char*>(p);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace dllm
