// AccumulateAttention. Reference: per query row, masked scores into `scratch`, max, then
// acc[j] += e^{s_j − max} / Σ e^{s − max}. Fast path: blocks of kRows query rows, scores of the
// block as one sgemm S = Q·Kᵀ·scale ([rows, n_kv]), then the same masked softmax per row (AVX2
// exp where available) added into acc.
#include "kernels/attention_stats.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/simd.h"

namespace glimpse::kernels {
namespace {

// Adds the softmax of one row of scores s [n_kv] (−inf where hidden) to acc. Overwrites s.
void AddSoftmaxRow(float* acc, float* s, int64_t n_kv) {
  float max = -INFINITY;
  for (int64_t j = 0; j < n_kv; ++j) max = std::max(max, s[j]);
  if (max == -INFINITY) return;  // nothing visible
  float sum = 0.0f;
  int64_t j = 0;
#ifdef GLIMPSE_KERNELS_AVX2
  const __m256 vmax = _mm256_set1_ps(max), neg_inf = _mm256_set1_ps(-INFINITY);
  __m256 vsum = _mm256_setzero_ps();
  for (; j + 8 <= n_kv; j += 8) {
    const __m256 x = _mm256_loadu_ps(s + j);
    // Exp clamps e^−∞ to ~1e−38; hidden entries must contribute exactly 0.
    const __m256 hidden = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
    const __m256 p = _mm256_andnot_ps(hidden, internal::Exp(_mm256_sub_ps(x, vmax)));
    vsum = _mm256_add_ps(vsum, p);
    _mm256_storeu_ps(s + j, p);
  }
  sum = internal::HorizontalSum(vsum);
#endif
  for (; j < n_kv; ++j) {
    s[j] = s[j] == -INFINITY ? 0.0f : std::exp(s[j] - max);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n_kv; ++i) acc[i] += s[i] * inv;
}

}  // namespace

void AccumulateAttentionReference(float* acc, const float* q, const int32_t* q_pos, const float* k,
                                  const int32_t* kv_pos, float scale, float* scratch, int64_t n_q,
                                  int64_t n_kv, int64_t head_dim) {
  for (int64_t i = 0; i < n_q; ++i) {
    const float* qi = q + i * head_dim;  // [head_dim]
    const float max =
        internal::VisibleScores(scratch, qi, q_pos[i], k, kv_pos, scale, n_kv, head_dim);
    if (max == -INFINITY) continue;
    float sum = 0.0f;
    for (int64_t j = 0; j < n_kv; ++j) {
      scratch[j] = scratch[j] == -INFINITY ? 0.0f : std::exp(scratch[j] - max);
      sum += scratch[j];
    }
    for (int64_t j = 0; j < n_kv; ++j) acc[j] += scratch[j] / sum;
  }
}

void AccumulateAttention(float* acc, const float* q, const int32_t* q_pos, const float* k,
                         const int32_t* kv_pos, float scale, int64_t n_q, int64_t n_kv,
                         int64_t head_dim) {
  if (n_q <= 0 || n_kv <= 0) return;
  constexpr int64_t kRows = 32;       // query rows per sgemm block
  thread_local std::vector<float> s;  // [kRows, n_kv] scores of the block
  s.resize(static_cast<size_t>(std::min(kRows, n_q) * n_kv));
  for (int64_t i0 = 0; i0 < n_q; i0 += kRows) {
    const int64_t rows = std::min(kRows, n_q - i0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(n_kv), static_cast<int>(head_dim), scale, q + i0 * head_dim,
                static_cast<int>(head_dim), k, static_cast<int>(head_dim), 0.0f, s.data(),
                static_cast<int>(n_kv));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s.data() + r * n_kv;  // [n_kv]
      for (int64_t j = 0; j < n_kv; ++j) {
        if (kv_pos[j] > q_pos[i0 + r]) row[j] = -INFINITY;
      }
      AddSoftmaxRow(acc, row, n_kv);
    }
  }
}

}  // namespace glimpse::kernels
