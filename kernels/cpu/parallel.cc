// ThreadPool: persistent workers woken by a generation counter. A worker spins briefly on the
// counter before sleeping on work_cv_, so back-to-back ParallelFor calls (decode's per-layer
// matmuls) do not pay a futex wake-up each. Every thread, the caller included, claims chunks
// from a shared cursor until none are left.
#include "kernels/cpu/parallel.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define GLIMPSE_CPU_RELAX() _mm_pause()
#else
#define GLIMPSE_CPU_RELAX() std::this_thread::yield()
#endif

namespace glimpse::kernels {
namespace {

// Iterations of pause (~10-40 ns each on x86) before a waiting thread blocks: about 50-200 µs.
constexpr int kSpinIterations = 1 << 12;
// Chunks per thread: enough to rebalance when a shared core is busy, few enough to keep matmul
// panels large.
constexpr int64_t kChunksPerThread = 4;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_.store(true);
  }
  work_cv_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  // Up to kChunksPerThread chunks per thread, a multiple of the thread count when there are enough
  // (equal shares when every thread runs), each at least min_chunk long.
  int64_t chunks =
      std::min<int64_t>(n / std::max<int64_t>(1, min_chunk), kChunksPerThread * size());
  if (chunks > size()) chunks -= chunks % size();
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  int64_t generation;
  {
    absl::MutexLock lock(&mu_);
    task_ = &fn;
    task_n_ = n;
    task_chunks_ = chunks;
    done_.store(0);
    generation = generation_.load() + 1;
    cursor_.store(static_cast<uint64_t>(generation) << 32);
    generation_.store(generation, std::memory_order_release);
  }
  work_cv_.SignalAll();
  RunChunks(generation, &fn, n, chunks);
  for (int i = 0; i < kSpinIterations && done_.load(std::memory_order_acquire) != chunks; ++i) {
    GLIMPSE_CPU_RELAX();
  }
  if (done_.load(std::memory_order_acquire) != chunks) {
    absl::MutexLock lock(&mu_);
    while (done_.load() != chunks) done_cv_.Wait(&mu_);
  }
}

int64_t ThreadPool::Claim(int64_t generation, int64_t chunks) {
  const uint64_t tag = static_cast<uint64_t>(generation) << 32;
  uint64_t cur = cursor_.load(std::memory_order_acquire);
  for (;;) {
    const int64_t next = static_cast<int64_t>(cur & 0xffffffffu);
    if ((cur & ~uint64_t{0xffffffffu}) != tag || next >= chunks) return -1;
    if (cursor_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) return next;
  }
}

void ThreadPool::RunChunks(int64_t generation, const std::function<void(int64_t, int64_t)>* fn,
                           int64_t n, int64_t chunks) {
  for (int64_t c; (c = Claim(generation, chunks)) >= 0;) {
    (*fn)(n * c / chunks, n * (c + 1) / chunks);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      absl::MutexLock lock(&mu_);  // the caller may be about to wait on done_cv_
      done_cv_.Signal();
    }
  }
}

void ThreadPool::WorkerLoop(int index) {
  int64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinIterations; ++i) {
      if (generation_.load(std::memory_order_acquire) != seen || stop_.load()) break;
      GLIMPSE_CPU_RELAX();
    }
    const std::function<void(int64_t, int64_t)>* task;
    int64_t n, chunks;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_.load() && generation_.load() == seen) work_cv_.Wait(&mu_);
      if (stop_.load()) return;
      seen = generation_.load();
      task = task_;
      n = task_n_;
      chunks = task_chunks_;
    }
    // Claims fail once the task is finished or replaced, so `task` is alive whenever it runs.
    RunChunks(seen, task, n, chunks);
  }
}

}  // namespace glimpse::kernels
