// Internal: receive buffers for the UCX transport, recycled by exact size so that steady
// streams of equal pages neither allocate nor page-fault. Thread-safe; a ReceivedBatch may
// return its buffers from any thread, also after the engine is gone (shared_ptr).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

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
      std::lock_guard l(mu_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        PooledBuffer b{std::move(it->second), size};
        free_.erase(it);
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
    std::lock_guard l(mu_);
    if (held_ + b.size > cap_) return;  // dropped: freed by the unique_ptr
    held_ += b.size;
    free_.emplace(b.size, std::move(b.data));
  }

 private:
  const size_t cap_;
  std::mutex mu_;
  size_t held_ = 0;
  std::multimap<size_t, std::unique_ptr<uint8_t, FreeDeleter>> free_;
};

}  // namespace glimpse::transport::ucx_internal
