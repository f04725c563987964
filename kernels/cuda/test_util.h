// Test helpers of the kernels/cuda tests: a fixture that skips without a device, saying where the
// tests do run, and fp16 rounding on the host.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/device_info.h"
#include "kernels/quant.h"

namespace glimpse::kernels::cuda::testing {

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device here; tools/device/check_cuda.sh runs these on a GPU";
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  void TearDown() override {
    if (DeviceCount() > 0) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
};

inline std::vector<uint16_t> HalfBits(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Fp32ToFp16(x[i]);
  return out;
}

// x with every element rounded to fp16 and back: what a kernel reading fp16 sees.
inline std::vector<float> RoundedToHalf(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Fp16ToFp32(Fp32ToFp16(x[i]));
  return out;
}

}  // namespace glimpse::kernels::cuda::testing
