// An owning device allocation of `n` elements of T (cudaMalloc/cudaFree), with copies to and from
// host vectors. Host code only; move-only. A failed allocation leaves the buffer empty (ok() false)
// rather than throwing, so callers on machines without a device can report and skip.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace glimpse::kernels::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t n) : n_(n) {
    if (n > 0 && cudaMalloc(&data_, sizeof(T) * n) != cudaSuccess) {
      data_ = nullptr;
      n_ = 0;
    }
  }
  // A copy of host[0, n) on the device.
  DeviceBuffer(const T* host, int64_t n) : DeviceBuffer(n) {
    if (data_ != nullptr) cudaMemcpy(data_, host, sizeof(T) * n, cudaMemcpyHostToDevice);
  }
  explicit DeviceBuffer(const std::vector<T>& host)
      : DeviceBuffer(host.data(), static_cast<int64_t>(host.size())) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), n_(std::exchange(other.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(n_, other.n_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  bool ok() const { return data_ != nullptr || n_ == 0; }
  T* data() const { return data_; }
  int64_t size() const { return n_; }

  // The buffer's contents (synchronises with the device).
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    if (n_ > 0) cudaMemcpy(host.data(), data_, sizeof(T) * n_, cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* data_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace glimpse::kernels::cuda
