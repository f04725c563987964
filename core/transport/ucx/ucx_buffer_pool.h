// Internal: receive buffers for the UCX transport, recycled by exact size so that steady
// streams of equal pages neither allocate nor page-fault. Last in, first out: the buffer handed
// out next is the one returned last, whose lines and TLB entries are the likeliest to be cached
// still (first in, first out cycled through every pooled buffer, all of them cold). Thread-safe;
// a ReceivedBatch may return its buffers from any thread, also after the engine is gone
// (shared_ptr).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace glimpse::transport::ucx_internal {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

struct PooledBuffer {
  std::unique_ptr<uint8_t, FreeDeleter> data;
  size_t size = 0;
};

class BufferPool {
 public:
  explicit BufferPool(size_t cap_bytes) : cap_(cap_bytes) {}

  PooledBuffer Get(size_t size) {
    {
      absl::MutexLock l(&mu_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        PooledBuffer b{std::move(it->second.back()), size};
        it->second.pop_back();
        if (it->second.empty()) free_.erase(it);
        held_ -= size;
        return b;
      }
    }
    void* p = nullptr;
    if (posix_memalign(&p, 64, size == 0 ? 64 : size) != 0) p = nullptr;
    return {std::unique_ptr<uint8_t, FreeDeleter>(static_cast<uint8_t*>(p)), size};
  }

  void Put(PooledBuffer b) {
    if (b.data == nullptr) return;
    absl::MutexLock l(&mu_);
    if (held_ + b.size > cap_) return;  // dropped: freed by the unique_ptr
    held_ += b.size;
    free_[b.size].push_back(std::move(b.data));
  }

 private:
  const size_t cap_;
  absl::Mutex mu_;
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
  // By size; each vector non-empty, used as a stack.
  std::map<size_t, std::vector<std::unique_ptr<uint8_t, FreeDeleter>>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::transport::ucx_internal
