// AttendRagged. Reference: per query row, scores into `scratch`, masked softmax, weighted sum of
// V (two passes). Fast path (AVX2, head_dim % 8 == 0): flash-attention-style online softmax
// (Dao et al. 2022: m' = max(m, max_j s_j), l' = l·e^{m−m'} + Σ_j e^{s_j−m'},
// o' = o·e^{m−m'} + Σ_j e^{s_j−m'}·v_j) over tiles of 16 keys and blocks of 4 query rows. K is
// first transposed to [tile][head_dim][16] so a tile's 16 scores are 2 vector accumulators per
// query row (no horizontal sums), and a tile whose smallest position exceeds every query position
// of the block is skipped (half of the work in causal prefill with sorted entries).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/simd.h"

namespace glimpse::kernels {
namespace internal {

float VisibleScores(float* scores, const float* q, int32_t q_pos, const float* k,
                    const int32_t* kv_pos, float scale, int64_t n_kv, int64_t head_dim) {
  float max = -INFINITY;
  for (int64_t j = 0; j < n_kv; ++j) {
    float s = -INFINITY;
    if (kv_pos[j] <= q_pos) {
      s = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) s += q[d] * k[j * head_dim + d];
      s *= scale;
    }
    scores[j] = s;
    max = std::max(max, s);
  }
  return max;
}

void AttendRaggedRef(float* out, const float* q, const int32_t* q_pos, const float* k,
                     const float* v, const int32_t* kv_pos, float scale, float* scratch,
                     int64_t n_q, int64_t n_kv, int64_t head_dim) {
  for (int64_t i = 0; i < n_q; ++i) {
    const float* qi = q + i * head_dim;  // [head_dim]
    float* oi = out + i * head_dim;      // [head_dim]
    const float max = VisibleScores(scratch, qi, q_pos[i], k, kv_pos, scale, n_kv, head_dim);
    std::fill(oi, oi + head_dim, 0.0f);
    if (max == -INFINITY) continue;  // nothing visible: zeros
    float sum = 0.0f;
    for (int64_t j = 0; j < n_kv; ++j) {
      if (scratch[j] == -INFINITY) continue;
      const float p = std::exp(scratch[j] - max);
      sum += p;
      for (int64_t d = 0; d < head_dim; ++d) oi[d] += p * v[j * head_dim + d];
    }
    for (int64_t d = 0; d < head_dim; ++d) oi[d] /= sum;
  }
}

}  // namespace internal

#ifdef GLIMPSE_KERNELS_AVX2
namespace {

constexpr int64_t KT = 16;  // keys per tile
constexpr int QB = 4;       // query rows per block

// K transposed per tile, with the tile's smallest position. Rows past n_kv are zero with position
// INT32_MAX, so they are never visible.
struct TransposedKeys {
  std::vector<float> kt;         // [n_tiles, head_dim, KT]
  std::vector<int32_t> pos;      // [n_tiles · KT]
  std::vector<int32_t> min_pos;  // [n_tiles]
};

// Tiles whose smallest position exceeds `max_q_pos` are never read and are left untransposed.
void TransposeKeys(TransposedKeys& t, const float* k, const int32_t* kv_pos, int64_t n_kv,
                   int64_t head_dim, int32_t max_q_pos) {
  const int64_t n_tiles = (n_kv + KT - 1) / KT;
  t.kt.resize(n_tiles * head_dim * KT);
  t.pos.assign(n_tiles * KT, std::numeric_limits<int32_t>::max());
  t.min_pos.assign(n_tiles, std::numeric_limits<int32_t>::max());
  for (int64_t j = 0; j < n_kv; ++j) {
    t.pos[j] = kv_pos[j];
    t.min_pos[j / KT] = std::min(t.min_pos[j / KT], kv_pos[j]);
  }
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    if (t.min_pos[tile] > max_q_pos) continue;
    float* dst = t.kt.data() + tile * head_dim * KT;  // [head_dim, KT]
    for (int64_t c = 0; c < KT; ++c) {
      const int64_t j = tile * KT + c;
      for (int64_t d = 0; d < head_dim; ++d)
        dst[d * KT + c] = j < n_kv ? k[j * head_dim + d] : 0.0f;
    }
  }
}

// Online-softmax state of NR query rows: o [NR, head_dim] unnormalised, running max m and sum l.
template <int NR>
void AttendBlock(float* out, const float* q, const int32_t* q_pos, const TransposedKeys& t,
                 const float* v, float scale, int64_t n_kv, int64_t head_dim, float* o) {
  float m[NR], l[NR];
  int32_t max_pos = std::numeric_limits<int32_t>::min();
  for (int r = 0; r < NR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    max_pos = std::max(max_pos, q_pos[r]);
  }
  std::fill(o, o + NR * head_dim, 0.0f);
  alignas(32) float p[NR][KT];
  const int64_t n_tiles = (n_kv + KT - 1) / KT;
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    if (t.min_pos[tile] > max_pos) continue;
    // S[r, 0..16) = q_r · K_tileᵀ · scale.
    const float* kt = t.kt.data() + tile * head_dim * KT;  // [head_dim, KT]
    __m256 s[NR][2];
    for (int r = 0; r < NR; ++r) s[r][0] = s[r][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + d * KT), k1 = _mm256_loadu_ps(kt + d * KT + 8);
      for (int r = 0; r < NR; ++r) {
        const __m256 qd = _mm256_broadcast_ss(q + r * head_dim + d);
        s[r][0] = _mm256_fmadd_ps(qd, k0, s[r][0]);
        s[r][1] = _mm256_fmadd_ps(qd, k1, s[r][1]);
      }
    }
    const __m256i pos0 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.pos.data() + tile * KT));
    const __m256i pos1 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.pos.data() + tile * KT + 8));
    const __m256 vscale = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY);
    bool any = false;
    for (int r = 0; r < NR; ++r) {
      // hidden = kv_pos > q_pos; hidden scores become −inf and their weights exactly 0.
      const __m256i qp = _mm256_set1_epi32(q_pos[r]);
      const __m256 hidden0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(pos0, qp));
      const __m256 hidden1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(pos1, qp));
      const __m256 s0 = _mm256_blendv_ps(_mm256_mul_ps(s[r][0], vscale), neg_inf, hidden0);
      const __m256 s1 = _mm256_blendv_ps(_mm256_mul_ps(s[r][1], vscale), neg_inf, hidden1);
      const float tile_max = internal::HorizontalMax(_mm256_max_ps(s0, s1));
      if (tile_max == -INFINITY) {
        std::memset(p[r], 0, sizeof(p[r]));
        continue;
      }
      any = true;
      if (tile_max > m[r]) {
        const float alpha = std::exp(m[r] - tile_max);  // 0 on the first visible tile
        l[r] *= alpha;
        for (int64_t d = 0; d < head_dim; d += 8) {
          _mm256_storeu_ps(
              o + r * head_dim + d,
              _mm256_mul_ps(_mm256_loadu_ps(o + r * head_dim + d), _mm256_set1_ps(alpha)));
        }
        m[r] = tile_max;
      }
      const __m256 vm = _mm256_set1_ps(m[r]);
      const __m256 p0 = _mm256_andnot_ps(hidden0, internal::Exp(_mm256_sub_ps(s0, vm)));
      const __m256 p1 = _mm256_andnot_ps(hidden1, internal::Exp(_mm256_sub_ps(s1, vm)));
      l[r] += internal::HorizontalSum(_mm256_add_ps(p0, p1));
      _mm256_store_ps(p[r], p0);
      _mm256_store_ps(p[r] + 8, p1);
    }
    if (!any) continue;
    // o[r] += Σ_j p[r][j] · v_j over the tile's valid keys.
    const int64_t j0 = tile * KT, nj = std::min(KT, n_kv - j0);
    for (int64_t d = 0; d < head_dim; d += 8) {
      __m256 acc[NR];
      for (int r = 0; r < NR; ++r) acc[r] = _mm256_loadu_ps(o + r * head_dim + d);
      for (int64_t j = 0; j < nj; ++j) {
        const __m256 vj = _mm256_loadu_ps(v + (j0 + j) * head_dim + d);
        for (int r = 0; r < NR; ++r)
          acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[r][j]), vj, acc[r]);
      }
      for (int r = 0; r < NR; ++r) _mm256_storeu_ps(o + r * head_dim + d, acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) out[r * head_dim + d] = o[r * head_dim + d] * inv;
  }
}

}  // namespace
#endif  // GLIMPSE_KERNELS_AVX2

void AttendRagged(float* out, const float* q, const int32_t* q_pos, const float* k, const float* v,
                  const int32_t* kv_pos, float scale, float* scratch, int64_t n_q, int64_t n_kv,
                  int64_t head_dim) {
#ifdef GLIMPSE_KERNELS_AVX2
  if (head_dim % 8 == 0 && n_kv > 0) {
    // Per-thread buffers reused across calls: transposed K and the block's unnormalised output.
    thread_local TransposedKeys keys;
    thread_local std::vector<float> o;
    const int32_t max_q_pos =
        n_q > 0 ? *std::max_element(q_pos, q_pos + n_q) : std::numeric_limits<int32_t>::min();
    TransposeKeys(keys, k, kv_pos, n_kv, head_dim, max_q_pos);
    o.resize(QB * head_dim);
    int64_t i = 0;
    for (; i + QB <= n_q; i += QB) {
      AttendBlock<QB>(out + i * head_dim, q + i * head_dim, q_pos + i, keys, v, scale, n_kv,
                      head_dim, o.data());
    }
    for (; i < n_q; ++i) {
      AttendBlock<1>(out + i * head_dim, q + i * head_dim, q_pos + i, keys, v, scale, n_kv,
                     head_dim, o.data());
    }
    return;
  }
#endif
  internal::AttendRaggedRef(out, q, q_pos, k, v, kv_pos, scale, scratch, n_q, n_kv, head_dim);
}

}  // namespace glimpse::kernels
