// A fixed pool of worker threads for data-parallel loops. Threads default to the machine's cores.
// ParallelFor is not reentrant: a task must not call ParallelFor on the same pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;  // GUARDED_BY(mu_)
  int64_t task_n_ = 0;                                            // GUARDED_BY(mu_)
  int64_t task_chunks_ = 0;                                       // GUARDED_BY(mu_)
  int64_t generation_ = 0;                                        // GUARDED_BY(mu_)
  int pending_ = 0;                                               // GUARDED_BY(mu_)
  bool stop_ = false;                                             // GUARDED_BY(mu_)
};

}  // namespace glimpse::kernels
