#include "kernels/cuda/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/test_util.h"
#include "kernels/matmul.h"

namespace glimpse::kernels::cuda {
namespace {

using kernels::testing::RandomFloats;

class CudaMatMulTest : public testing::DeviceTest {};

// out[m, rows] against a double-precision product of the fp16-rounded operands: the layout and
// the fp32 accumulation, with nothing but summation order between them.
TEST_F(CudaMatMulTest, EqualsTheProductOfTheRoundedOperands) {
  const int64_t rows = 67, cols = 96;
  const std::vector<float> w = RandomFloats(rows * cols, 21);
  DeviceBuffer<float> w32(w);
  DeviceBuffer<uint16_t> w16(rows * cols);
  ASSERT_EQ(
      DequantizeRows(w16.data(), Precision::kF16, w32.data(), DType::kF32, rows, cols, nullptr),
      cudaSuccess);
  const std::vector<float> wr = testing::RoundedToHalf(w);
  Blas blas(nullptr);
  ASSERT_TRUE(blas.ok());
  for (const int64_t m : {1, 3, 8, 37}) {
    const std::vector<float> x = RandomFloats(m * cols, 22 + m, -2, 2);
    const std::vector<float> xr = testing::RoundedToHalf(x);
    DeviceBuffer<float> dx(x), out(m * rows);
    DeviceBuffer<uint16_t> scratch(m * cols);
    const DeviceWeight weight{w16.data(), Precision::kF16, rows, cols};
    ASSERT_EQ(MatMul(blas, out.data(), dx.data(), weight, m, scratch.data()),
              CUBLAS_STATUS_SUCCESS);
    const std::vector<float> got = out.ToHost();
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += double{wr[r * cols + c]} * xr[t * cols + c];
          mag += std::fabs(double{wr[r * cols + c]} * xr[t * cols + c]);
        }
        ASSERT_NEAR(got[t * rows + r], ref, 1e-5 * mag + 1e-6) << m << ": " << t << "," << r;
      }
    }
  }
}

// The product of a quantised weight against kernels/cpu's MatMul (fp32 throughout): the device
// differs by the two fp16 roundings only.
TEST_F(CudaMatMulTest, QuantisedWeightsMatchTheCpuMatMul) {
  const int64_t rows = 129, cols = 256, m = 5;
  const std::vector<float> w = RandomFloats(rows * cols, 31);
  std::vector<uint8_t> q(rows * RowBytes(DType::kQ8_0, cols));
  // Q8_0 by hand: one scale per 32 elements, codes rounded to nearest.
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(w[b * 32 + i]));
    const uint16_t d = Fp32ToFp16(amax / 127);
    std::memcpy(&q[b * 34], &d, 2);
    for (int i = 0; i < 32; ++i) {
      q[b * 34 + 2 + i] =
          static_cast<uint8_t>(static_cast<int8_t>(std::lround(w[b * 32 + i] / Fp16ToFp32(d))));
    }
  }
  const std::vector<float> x = RandomFloats(m * cols, 32);
  std::vector<float> ref(m * rows);
  ThreadPool pool(1);
  kernels::MatMul(ref.data(), x.data(), {q.data(), DType::kQ8_0, rows, cols}, m, pool);

  DeviceBuffer<uint8_t> dq(q);
  DeviceBuffer<uint16_t> w16(rows * cols), scratch(m * cols);
  ASSERT_EQ(
      DequantizeRows(w16.data(), Precision::kF16, dq.data(), DType::kQ8_0, rows, cols, nullptr),
      cudaSuccess);
  DeviceBuffer<float> dx(x), out(m * rows);
  Blas blas(nullptr);
  ASSERT_EQ(MatMul(blas, out.data(), dx.data(), {w16.data(), Precision::kF16, rows, cols}, m,
                   scratch.data()),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = out.ToHost();
  std::vector<float> deq(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(deq.data() + r * cols, q.data() + r * RowBytes(DType::kQ8_0, cols), DType::kQ8_0,
                  cols);
  }
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      // Each term moves by at most 2⁻¹¹ of its size per rounding, two roundings.
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c)
        mag += std::fabs(double{deq[r * cols + c]} * x[t * cols + c]);
      ASSERT_NEAR(got[t * rows + r], ref[t * rows + r], 2.0 * mag / 2048 + 1e-5) << t << "," << r;
    }
  }
}

}  // namespace
}  // namespace glimpse::kernels::cuda
