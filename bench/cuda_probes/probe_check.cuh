// The probes' check of a CUDA runtime or cuBLAS call: any non-zero status prints it with the file
// and line and exits (the probes are standalone programs, not part of the CMake build).
#pragma once

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                            \
  do {                                                                                   \
    const auto ck_status = (x);                                                          \
    if (static_cast<int>(ck_status) != 0) {                                              \
      std::printf("err %d at %s:%d\n", static_cast<int>(ck_status), __FILE__, __LINE__); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)
