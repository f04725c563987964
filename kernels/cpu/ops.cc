// Element-wise and row-wise ops. RmsNorm, SiluMul and SoftmaxRows have scalar references (below,
// tested against) and AVX2 paths using the vector exp of simd.h; the rest are plain loops the
// compiler vectorises.
#include "kernels/ops.h"

#include <cmath>

#include "kernels/cpu/ops_internal.h"
#include "kernels/cpu/simd.h"

namespace glimpse::kernels {
namespace internal {

// llama.cpp's ggml_compute_forward_rms_norm: mean of squares accumulated in double, then
// scale = 1 / sqrtf(mean + eps).
void RmsNormRef(float* out, const float* x, const float* w, float eps, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;  // [dim]
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = xr[i] * scale * w[i];
  }
}

void SiluMulRef(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void SoftmaxRowsRef(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * n;  // [n]
    float max = -INFINITY;
    for (int64_t i = 0; i < n; ++i) max = std::fmax(max, xr[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i] = std::exp(xr[i] - max);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) xr[i] *= inv;
  }
}

}  // namespace internal

#ifdef GLIMPSE_KERNELS_AVX2

void RmsNorm(float* out, const float* x, const float* w, float eps, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;  // [dim]
    float* orow = out + r * dim;    // [dim], may alias xr
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
      const __m256 a = _mm256_loadu_ps(xr + i), b = _mm256_loadu_ps(xr + i + 8);
      acc0 = _mm256_fmadd_ps(a, a, acc0);
      acc1 = _mm256_fmadd_ps(b, b, acc1);
    }
    float sum = internal::HorizontalSum(_mm256_add_ps(acc0, acc1));
    for (; i < dim; ++i) sum += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= dim; i += 8) {
      _mm256_storeu_ps(orow + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vs),
                                               _mm256_loadu_ps(w + i)));
    }
    for (; i < dim; ++i) orow[i] = xr[i] * scale * w[i];
  }
}

void SiluMul(float* out, const float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = internal::Exp(_mm256_xor_ps(g, sign));  // e^−g
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  internal::SiluMulRef(out + i, gate + i, up + i, n - i);
}

void SoftmaxRows(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * n;  // [n]
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(xr + i));
    float max = internal::HorizontalMax(vmax);
    for (; i < n; ++i) max = std::fmax(max, xr[i]);
    const __m256 vm = _mm256_set1_ps(max);
    __m256 vsum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
      const __m256 e = internal::Exp(_mm256_sub_ps(_mm256_loadu_ps(xr + i), vm));
      _mm256_storeu_ps(xr + i, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = internal::HorizontalSum(vsum);
    for (; i < n; ++i) sum += xr[i] = std::exp(xr[i] - max);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8)
      _mm256_storeu_ps(xr + i, _mm256_mul_ps(_mm256_loadu_ps(xr + i), inv));
    for (; i < n; ++i) xr[i] *= 1.0f / sum;
  }
}

#else

void RmsNorm(float* out, const float* x, const float* w, float eps, int64_t rows, int64_t dim) {
  internal::RmsNormRef(out, x, w, eps, rows, dim);
}
void SiluMul(float* out, const float* gate, const float* up, int64_t n) {
  internal::SiluMulRef(out, gate, up, n);
}
void SoftmaxRows(float* x, int64_t rows, int64_t n) { internal::SoftmaxRowsRef(x, rows, n); }

#endif  // GLIMPSE_KERNELS_AVX2

// Rotation by θ_i = pos·inv_freq[i] of channel pairs (a, b): a' = a·cos θ − b·sin θ,
// b' = a·sin θ + b·cos θ; pairs are (2i, 2i+1) (GGML "norm") or (i, i + d/2) (GGML "neox").
void Rope(float* x, const int32_t* pos, const float* inv_freq, RopeStyle style, int64_t n_tokens,
          int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t a_step = style == RopeStyle::kInterleaved ? 2 : 1;    // channel a of pair i
  const int64_t b_off = style == RopeStyle::kInterleaved ? 1 : half;  // channel b = a + b_off
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* xt = x + t * n_heads * head_dim;  // [n_heads, head_dim]
    for (int64_t i = 0; i < half; ++i) {
      const float theta = static_cast<float>(pos[t]) * inv_freq[i];
      const float c = std::cos(theta), s = std::sin(theta);
      for (int64_t h = 0; h < n_heads; ++h) {
        float* a = xt + h * head_dim + i * a_step;
        const float x0 = a[0], x1 = a[b_off];
        a[0] = x0 * c - x1 * s;
        a[b_off] = x0 * s + x1 * c;
      }
    }
  }
}

void AddBias(float* x, const float* bias, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] += bias[i];
  }
}

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace glimpse::kernels
