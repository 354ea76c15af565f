// The process-wide CPU thread pool (core/thread_pool.h): every index exactly once in static
// contiguous chunks, nested loops, thousands of back-to-back loops across resizes (the wake-up
// handshake: no chunk lost or run twice), and the range check of --threads.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace dllm {
namespace {

// Restores the thread count a test changed.
struct KeepThreads {
  int saved = num_threads();
  ~KeepThreads() { set_num_threads(saved); }
};

TEST(ThreadPool, EveryIndexOnceInStaticContiguousChunks) {
  KeepThreads keep;
  for (const int threads : {1, 2, 3, 5})
    for (const int64_t n : {0, 1, 2, 3, 7, 100, 1001})
      for (const int64_t min_chunk : {1, 3, 64}) {
        set_num_threads(threads);
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        parallel_for(
            n,
            [&](int64_t first, int64_t last) {
              for (int64_t i = first; i < last; ++i) seen[static_cast<size_t>(i)]++;
              std::lock_guard lock(mu);
              chunks.emplace_back(first, last);
            },
            min_chunk);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1)
              << "threads=" << threads << " n=" << n << " index " << i;
        if (n == 0) {
          EXPECT_TRUE(chunks.empty());
          continue;
        }
        const int64_t want =
            std::min<int64_t>(threads, (n + min_chunk - 1) / min_chunk);
        ASSERT_EQ(static_cast<int64_t>(chunks.size()), want) << "threads=" << threads << " n=" << n;
        std::sort(chunks.begin(), chunks.end());
        for (int64_t t = 0; t < want; ++t) {
          EXPECT_EQ(chunks[static_cast<size_t>(t)].first, n * t / want);
          EXPECT_EQ(chunks[static_cast<size_t>(t)].second, n * (t + 1) / want);
        }
      }
}

TEST(ThreadPool, NestedLoopsRunOnTheCallingThread) {
  KeepThreads keep;
  set_num_threads(3);
  std::atomic<int64_t> sum{0};
  parallel_for(6, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      parallel_for(10, [&](int64_t a, int64_t b) {
        for (int64_t j = a; j < b; ++j) sum += i * 10 + j;
      });
  });
  EXPECT_EQ(sum.load(), 59 * 60 / 2);
}

TEST(ThreadPool, ThousandsOfLoopsAcrossResizes) {
  KeepThreads keep;
  for (int round = 0; round < 4000; ++round) {
    if (round % 500 == 0) set_num_threads(1 + (round / 500) % 4);
    const int64_t n = 1 + round % 37;
    std::atomic<int64_t> sum{0};
    parallel_for(n, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), n * (n - 1) / 2) << "round " << round;
  }
}

TEST(ThreadPool, CountOutsideTheRangeIsRejected) {
  KeepThreads keep;
  for (const int bad : {0, -1, kMaxThreads + 1}) {
    try {
      set_num_threads(bad);
      FAIL() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--threads must be between 1 and 256"),
                std::string::npos)
          << e.what();
    }
  }
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
}

}  // namespace
}  // namespace dllm
