#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

namespace glimpse::kernels {
namespace {

// Every index in [0, n) is visited exactly once, by chunks of at least min_chunk (except when
// n < min_chunk, which runs as one chunk).
TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {1, 2, 3, 7, 19, 733, 100000}) {
      for (int64_t min_chunk : {1, 4, 64}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int64_t> small_chunks{0};
        pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
          if (end - begin < min_chunk && end - begin != n) small_chunks.fetch_add(1);
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << i;
        EXPECT_EQ(small_chunks.load(), 0);
      }
    }
  }
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Chunks that take a while, so the workers claim some before the caller drains the cursor.
  pool.ParallelFor(12, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPoolTest, ManyBackToBackLoopsAndEmptyRange) {
  ThreadPool pool(2);
  int64_t total = 0;
  std::atomic<int64_t> sum{0};
  for (int iter = 0; iter < 20000; ++iter) {
    pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    total += 64;
  }
  EXPECT_EQ(sum.load(), total);
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, DefaultSizeAndDestructionWhileIdle) {
  {
    ThreadPool pool;
    EXPECT_GE(pool.size(), 1);
  }
  ThreadPool pool(4);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers past their spin, asleep
  std::atomic<int> calls{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) { calls.fetch_add(static_cast<int>(e - b)); });
  EXPECT_EQ(calls.load(), 4);
}

}  // namespace
}  // namespace glimpse::kernels
