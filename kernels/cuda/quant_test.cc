#include "kernels/cuda/quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/test_util.h"
#include "kernels/quant.h"

namespace glimpse::kernels::cuda {
namespace {

using kernels::testing::AllClose;
using kernels::testing::RandomFloats;

constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                            DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

void PutHalf(uint8_t* at, float x) {
  const uint16_t h = Fp32ToFp16(x);
  std::memcpy(at, &h, 2);
}

// `rows` random rows of `cols` elements stored as `type`: random quant bytes, small finite scales.
std::vector<uint8_t> RandomRows(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = rows * cols;
  std::vector<uint8_t> out(rows * RowBytes(type, cols));
  if (type == DType::kF32 || type == DType::kF16 || type == DType::kBF16) {
    const std::vector<float> x = RandomFloats(n, seed, -4, 4);
    for (int64_t i = 0; i < n; ++i) {
      if (type == DType::kF32) {
        std::memcpy(&out[4 * i], &x[i], 4);
      } else if (type == DType::kF16) {
        PutHalf(&out[2 * i], x[i]);
      } else {
        uint32_t u;
        std::memcpy(&u, &x[i], 4);
        const uint16_t b = static_cast<uint16_t>(u >> 16);
        std::memcpy(&out[2 * i], &b, 2);
      }
    }
    return out;
  }
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const int64_t bytes = BlockBytes(type);
  for (int64_t at = 0; at < static_cast<int64_t>(out.size()); at += bytes) {
    uint8_t* block = &out[at];
    switch (type) {
      case DType::kQ4_0:
      case DType::kQ8_0:
        PutHalf(block, scale(rng));
        break;
      case DType::kQ4_1:
      case DType::kQ4_K:
      case DType::kQ5_K:
        PutHalf(block, scale(rng));
        PutHalf(block + 2, -scale(rng));
        break;
      case DType::kQ6_K:
        PutHalf(block + 208, scale(rng));
        break;
      default:
        break;
    }
  }
  return out;
}

class CudaQuantTest : public testing::DeviceTest {};

TEST_F(CudaQuantTest, EveryFormatDecodesToTheCpuValueWithinOneRounding) {
  const int64_t rows = 13, cols = 512;
  for (const DType type : kTypes) {
    for (const Precision precision : {Precision::kF16, Precision::kBF16}) {
      const std::vector<uint8_t> stored = RandomRows(type, rows, cols, 11);
      std::vector<float> ref(rows * cols);
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(ref.data() + r * cols, stored.data() + r * RowBytes(type, cols), type, cols);
      }
      DeviceBuffer<uint8_t> in(stored);
      DeviceBuffer<uint16_t> out(rows * cols);
      ASSERT_EQ(DequantizeRows(out.data(), precision, in.data(), type, rows, cols, nullptr),
                cudaSuccess);
      const std::vector<uint16_t> bits = out.ToHost();
      std::vector<float> got(bits.size());
      for (size_t i = 0; i < bits.size(); ++i) {
        got[i] = precision == Precision::kF16 ? Fp16ToFp32(bits[i]) : Bf16ToFp32(bits[i]);
      }
      // One rounding to 11 (fp16) or 8 (bf16) significant bits, plus fp32 contraction.
      const float rtol = precision == Precision::kF16 ? 1.0e-3f : 8.0e-3f;
      EXPECT_TRUE(AllClose(got.data(), ref.data(), rows * cols, 6e-8f, rtol))
          << DTypeName(type) << (precision == Precision::kF16 ? " fp16" : " bf16");
    }
  }
}

TEST_F(CudaQuantTest, RowsThatAreNotWholeBlocksAreRefused) {
  DeviceBuffer<uint8_t> in(1024);
  DeviceBuffer<uint16_t> out(1024);
  EXPECT_EQ(DequantizeRows(out.data(), Precision::kF16, in.data(), DType::kQ4_K, 1, 100, nullptr),
            cudaErrorInvalidValue);
}

TEST_F(CudaQuantTest, RoundToIsRoundToNearestEven) {
  const std::vector<float> x = RandomFloats(1001, 12, -100, 100);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> out(x.size());
  ASSERT_EQ(RoundTo(out.data(), Precision::kF16, dx.data(), x.size(), nullptr), cudaSuccess);
  EXPECT_EQ(out.ToHost(), testing::HalfBits(x));
}

}  // namespace
}  // namespace glimpse::kernels::cuda
