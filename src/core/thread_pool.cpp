#include "core/thread_pool.h"

#include <immintrin.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace dllm {
namespace {

// How long an idle thread polls its word before it sleeps in the kernel: 50 µs. A forward is a
// chain of short parallel loops, and a worker that slept between two of them paid the kernel's
// wake-up (and, on a busy machine, a wait for the scheduler) at the next. Measured on the 2-core
// Zen 5 VM, 2026-11-30 (docs/benchmarks.md, "CPU thread pool"), against the ~2 µs before:
// `dllm generate -m models/tiny-full --strategy full -p hello --max-tokens 32` idle 0.22 -> 0.18 s,
// beside two busy processes 2.7-5.6 -> 0.34-0.40 s, beside six 4.0 -> 4.1 s; eight batched
// requests of the embedded model 3.6 -> 1.6 ms a step. (An earlier pool measured 20-100 µs worse
// on a machine loaded by builds; with sched_yield() in the loop instead of pause it collapsed
// beside two busy processes: a yielding thread hands them whole time slices.)
constexpr auto kSpin = std::chrono::microseconds(50);

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= kMaxThreads) return static_cast<int>(n);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return std::clamp(CPU_COUNT(&set), 1, kMaxThreads);
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxThreads);
}

// Polls `word` until done(value) for kSpin, then sleeps on it (woken by notify).
template <class Done>
void spin_then_wait(const std::atomic<uint32_t>& word, Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 16; ++i) {  // (the clock read, ~20 ns, every 16 polls)
      if (done(word.load(std::memory_order_acquire))) return;
      _mm_pause();
    }
  } while (std::chrono::steady_clock::now() < until);
  for (;;) {
    const uint32_t v = word.load(std::memory_order_acquire);
    if (done(v)) return;
    word.wait(v, std::memory_order_acquire);
  }
}

thread_local bool t_in_chunk = false;

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) { grow(threads); }

  int threads() const { return threads_; }
  void resize(int threads) {
    std::lock_guard lock(run_mutex_);
    grow(threads);
    threads_ = threads;
  }

  // Only the workers a loop needs are woken, each through its own word; the caller waits for all
  // of them before it returns, so the job below is never rewritten while a worker reads it.
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
    if (n <= 0) return;
    const int64_t chunks = std::min<int64_t>(threads_, (n + min_chunk - 1) / min_chunk);
    if (chunks <= 1 || t_in_chunk) {
      fn(0, n);
      return;
    }
    std::lock_guard lock(run_mutex_);  // one parallel loop at a time (engine thread + tests)
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    pending_.store(static_cast<uint32_t>(chunks - 1), std::memory_order_relaxed);
    for (int64_t t = 1; t < chunks; ++t) {
      Worker& w = *workers_[static_cast<size_t>(t - 1)];
      w.go.fetch_add(1, std::memory_order_release);
      w.go.notify_one();
    }
    run_chunk(0);
    spin_then_wait(pending_, [](uint32_t left) { return left == 0; });
  }

 private:
  // One cache line per worker: its wake-up word is written only by the caller of a loop.
  struct alignas(64) Worker {
    std::atomic<uint32_t> go{0};
  };

  void grow(int threads) {
    while (static_cast<int>(workers_.size()) < threads - 1) {
      workers_.push_back(std::make_unique<Worker>());
      Worker* w = workers_.back().get();
      const int64_t chunk = static_cast<int64_t>(workers_.size());
      std::thread([this, w, chunk] { work(*w, chunk); }).detach();  // lives as long as the process
    }
  }

  void run_chunk(int64_t t) {
    const int64_t begin = n_ * t / chunks_, end = n_ * (t + 1) / chunks_;
    t_in_chunk = true;
    (*fn_)(begin, end);
    t_in_chunk = false;
  }

  void work(Worker& w, int64_t chunk) {
    for (uint32_t seen = 0;; ++seen) {
      spin_then_wait(w.go, [seen](uint32_t g) { return g != seen; });
      run_chunk(chunk);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  int threads_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex run_mutex_;
  std::atomic<uint32_t> pending_{0};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // never destroyed: workers sleep until exit
  return *p;
}

}  // namespace

int num_threads() {
  return pool().threads();
}

void set_num_threads(int threads, const char* what) {
  if (threads < 1 || threads > kMaxThreads)
    fail(what, " must be between 1 and ", kMaxThreads, " (got ", threads, ")");
  pool().resize(threads);
  omp_set_num_threads(threads);
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  pool().run(n, fn, std::max<int64_t>(min_chunk, 1));
}

}  // namespace dllm
