// MatMul: decode (m small) reads the stored weight rows with DotRows / DotRowsTokens against fp32
// x, decoding them in registers; prefill dequantises panels of W rows to fp32 (sized to stay in L2
// with sgemm's packed blocks) and multiplies each panel with all m activations in one
// single-threaded OpenBLAS sgemm. Both compute x · dequant(W)ᵀ in fp32 and differ only in summation
// order, so the cut-over between them (kMatMulDotMaxM) is purely a speed choice and decode matches
// an fp32 reference model as prefill does. Rows, and so panels, are split across the pool.
#include "kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/cpu/matmul_internal.h"

namespace glimpse::kernels {
namespace {

// OpenBLAS must not start its own threads under ours (Debian's libopenblas0-pthread declares
// openblas_set_num_threads in <cblas.h>).
void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Per-thread scratch reused across calls, so the hot path does not allocate after warm-up.
std::vector<float>& PanelBuffer() {
  thread_local std::vector<float> buffer;
  return buffer;
}

// out[m, w.rows] for rows [r0, r1) via DotRows (one token) or DotRowsTokens, which decodes each
// weight block once for several tokens.
void DotRowRange(float* out, const float* x, const WeightView& w, int64_t m, int64_t r0,
                 int64_t r1) {
  const int64_t w_stride = RowBytes(w.type, w.cols);
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + r0 * w_stride;
  if (m == 1) {
    DotRows(out + r0, base, w_stride, r1 - r0, w.type, x, w.cols);
  } else {
    DotRowsTokens(out + r0, w.rows, base, w_stride, r1 - r0, w.type, x, m, w.cols);
  }
}

// Rows [r0, r1) through fp32 panels: panel[R, cols] = dequant(W[r, :]); out[:, r..r+R] =
// x[m, cols] · panelᵀ.
void PanelRows(float* out, const float* x, const WeightView& w, int64_t m, int64_t r0, int64_t r1) {
  const int64_t w_stride = RowBytes(w.type, w.cols);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  std::vector<float>& panel = PanelBuffer();
  // Equal panels of about MatMulPanelRows rows over this range.
  const int64_t target = internal::MatMulPanelRows(w.cols);
  const int64_t panels = std::max<int64_t>(1, (r1 - r0 + target / 2) / target);
  const int64_t panel_rows = (r1 - r0 + panels - 1) / panels;
  panel.resize(static_cast<size_t>(panel_rows * w.cols));
  for (int64_t p0 = r0; p0 < r1; p0 += panel_rows) {
    const int64_t rows = std::min(panel_rows, r1 - p0);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(panel.data() + r * w.cols, base + (p0 + r) * w_stride, w.type, w.cols);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                static_cast<int>(rows), static_cast<int>(w.cols), 1.0f, x, static_cast<int>(w.cols),
                panel.data(), static_cast<int>(w.cols), 0.0f, out + p0, static_cast<int>(w.rows));
  }
}

}  // namespace

namespace internal {

int64_t MatMulPanelRows(int64_t cols) {
  // ~512 KiB of fp32 panel (half of the development machine's 1 MiB L2 per core): measured best of
  // 64 KiB … 4 MiB at m = 512 for cols 576 and 1536 (smaller panels re-pack x too often, larger
  // ones spill to L3).
  const int64_t rows = (512 * 1024 / 4) / std::max<int64_t>(cols, 1);
  return std::clamp<int64_t>(rows / 16 * 16, 16, 1024);
}

void MatMulDot(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool) {
  pool.ParallelFor(w.rows, 16, [&](int64_t r0, int64_t r1) { DotRowRange(out, x, w, m, r0, r1); });
}

void MatMulPanels(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool) {
  UseSingleThreadedBlas();
  if (w.type == DType::kF32) {
    pool.ParallelFor(w.rows, 16, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                  static_cast<int>(r1 - r0), static_cast<int>(w.cols), 1.0f, x,
                  static_cast<int>(w.cols), static_cast<const float*>(w.data) + r0 * w.cols,
                  static_cast<int>(w.cols), 0.0f, out + r0, static_cast<int>(w.rows));
    });
    return;
  }
  // Units of one panel each (about MatMulPanelRows rows, a multiple of the thread count so shares
  // are equal); the pool hands out runs of whole units.
  const int64_t threads = pool.size();
  const int64_t per_thread = std::max<int64_t>(1, w.rows / (threads * MatMulPanelRows(w.cols)));
  const int64_t units = std::min<int64_t>(w.rows, threads * per_thread);
  pool.ParallelFor(units, 1, [&](int64_t u0, int64_t u1) {
    PanelRows(out, x, w, m, w.rows * u0 / units, w.rows * u1 / units);
  });
}

}  // namespace internal

void MatMul(float* out, const float* x, const WeightView& w, int64_t m, ThreadPool& pool) {
  if (m <= 0 || w.rows <= 0) return;
  if (m <= internal::kMatMulDotMaxM) {
    internal::MatMulDot(out, x, w, m, pool);
  } else {
    internal::MatMulPanels(out, x, w, m, pool);
  }
}

}  // namespace glimpse::kernels
