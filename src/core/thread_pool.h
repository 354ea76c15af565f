// The CPU threads: one process-wide pool that every parallel loop of the CPU backend and the host
// code runs on (the GEMM, norms, RoPE, attention, token statistics, S2D2 verification).
//
// Why not OpenMP: GCC's libgomp lets an idle worker spin for ~300,000 iterations (milliseconds)
// after every parallel region unless OMP_WAIT_POLICY is set in the environment before the program
// starts, and it cannot be changed from inside the process. On a shared machine (CI runners, a
// laptop, other helpers' builds) that spinning takes cores from everything else, and from our own
// serial work between regions. Here an idle thread polls a few times (kSpinPolls, ~2 us) and then
// sleeps in the kernel (std::atomic::wait, a futex on Linux): on a shared machine this was the
// fastest of the spin lengths measured, and 4-6x faster than libgomp's default.
//
// Work is split into contiguous static chunks, chunk t of T = [n·t/T, n·(t+1)/T): which thread
// computes an element never changes its arithmetic (the GEMM is batch and thread invariant,
// gemm_f32.h).
#pragma once

#include <cstdint>
#include <functional>

namespace dllm {

constexpr int kMaxThreads = 256;

// Threads the pool uses, the calling thread included. Default: OMP_NUM_THREADS when it is set to
// a valid count (what CPU users already set), else the CPUs this process may run on
// (sched_getaffinity: taskset / container cpusets).
int num_threads();
// Sets the count (1..kMaxThreads; an Error naming `what` and the range otherwise). Also sets
// OpenMP's count for any OpenMP code left in the process (benchmarks).
void set_num_threads(int threads, const char* what = "--threads");

// Runs fn(begin, end) over static chunks of [0, n), at most one chunk per thread and at most
// ceil(n / min_chunk) chunks; returns when every chunk is done. The caller runs chunk 0. A call
// from inside a chunk (nested) runs serially on that thread.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                  int64_t min_chunk = 1);

}  // namespace dllm
