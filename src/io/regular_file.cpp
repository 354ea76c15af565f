#include "io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace dllm {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a plain file";
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path) : path_(path.string()) {
  // O_NONBLOCK only matters for what we refuse below: opening a FIFO for reading would otherwise
  // wait for a writer. Regular files ignore it.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) fail(path_, ": cannot open: ", std::strerror(errno));
  // A throwing constructor runs no destructor: close the descriptor before failing.
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fail(path_, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(path_, ": not a regular file (it is ", file_kind(st.st_mode), ")");
  }
  size_ = static_cast<size_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_all() const {
  std::string out(size_, '\0');
  size_t done = 0;
  while (done < size_) {
    const ssize_t n = ::pread(fd_, out.data() + done, size_ - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path_, ": read error: ", std::strerror(errno));
    if (n == 0) fail(path_, ": file shrank while being read (", done, " of ", size_, " bytes)");
    done += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace dllm
