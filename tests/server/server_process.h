// A real `dllm serve` process for the tests: started on a free loopback port (--port 0; the
// port is read from its start-up line), stopped with SIGTERM.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace dllm::test {

class ServerProcess {
 public:
  // `args` after `dllm serve --port 0`; fails the test (ADD_FAILURE) when it does not start.
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();  // SIGKILL if still running
  int port() const { return port_; }
  bool started() const { return port_ > 0; }
  // SIGTERM, then waits at most `seconds`; the exit status (-1: had to be killed).
  int terminate(double seconds = 30);
  std::string log() const;  // its stderr so far

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

}  // namespace dllm::test
