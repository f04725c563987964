// A fixed pool of worker threads for data-parallel loops. Threads default to the machine's cores.
// ParallelFor is not reentrant: a task must not call ParallelFor on the same pool, and one pool
// serves one caller thread at a time. Workers sleep on a condition variable between tasks after a
// short spin (decode issues hundreds of small loops per token; a futex wake-up per loop would cost
// more than the loop).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace glimpse::kernels {

class ThreadPool {
 public:
  // `threads` <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into contiguous chunks of at least `min_chunk` and runs fn(begin, end) on them,
  // using the calling thread too. Returns when every chunk is done.
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  absl::CondVar work_cv_;
  absl::CondVar done_cv_;
  const std::function<void(int64_t, int64_t)>* task_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t task_n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t task_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  // Chunks are claimed dynamically (cursor_), so a descheduled worker — the cores are shared —
  // delays a loop only by a chunk it actually claimed; the caller takes the rest.
  // Bumped under mu_ when a task is published; spinning workers read it without the lock.
  std::atomic<int64_t> generation_{0};
  // (generation mod 2³² << 32) | next unclaimed chunk; claims are CAS on the whole word, so a
  // late worker can never claim a chunk of a newer task while holding an older task's fields.
  std::atomic<uint64_t> cursor_{0};
  std::atomic<int64_t> done_{0};   // chunks finished in the current task
  std::atomic<bool> stop_{false};  // written under mu_

  int64_t Claim(int64_t generation, int64_t chunks);
  void RunChunks(int64_t generation, const std::function<void(int64_t, int64_t)>* fn, int64_t n,
                 int64_t chunks);
};

}  // namespace glimpse::kernels
