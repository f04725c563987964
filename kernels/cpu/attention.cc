// AttendRagged and AttendPaged. Reference: per query row, scores into a buffer, masked softmax,
// weighted sum of V (two passes), over rows dequantised to fp32. Fast path (AVX2, head_dim % 8 ==
// 0): flash-attention-style online softmax (Dao et al. 2022: m' = max(m, max_j s_j),
// l' = l·e^{m−m'} + Σ_j e^{s_j−m'}, o' = o·e^{m−m'} + Σ_j e^{s_j−m'}·v_j) over tiles of 16 keys of
// one page: a tile's keys are dequantised once, transposed to [head_dim][16] so its 16 scores are
// 2 vector accumulators per query row (no horizontal sums), its values dequantised to
// [16][head_dim], and every block of 4 query rows is updated from it. A tile whose smallest
// position exceeds every query position of a block is skipped for that block (half of the work in
// causal prefill with sorted entries). Each row sees the tiles in the same order whatever the
// blocking, so the result of a row does not depend on the other rows of the call. Calls of at most
// 8 query rows (decode: one token's query heads of a kv head) take a direct path instead
// (AttendFewRows: no tile copies, keys and values dequantised in registers), so a row's rounding
// depends on whether its call had more than 8 rows; both agree with the reference to fp32
// rounding.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/quant.h"

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

float E4m3ToFp32(uint8_t code) {
  const int em = code & 0x7F;
  float v;
  if (em == 0x7F) {
    v = std::nanf("");
  } else if ((em >> 3) == 0) {
    v = std::ldexp(static_cast<float>(em), -9);  // subnormal: m · 2^−9
  } else {
    v = std::ldexp(static_cast<float>(8 + (em & 7)), (em >> 3) - 10);  // (1 + m/8) · 2^(e−7)
  }
  return (code & 0x80) ? -v : v;
}

void DequantizeKvRowRef(float* x, KvDType dtype, const void* data, const float* scales, int64_t r,
                        int64_t head_dim) {
  const int64_t at = r * head_dim;
  switch (dtype) {
    case KvDType::kF32:
      std::memcpy(x, static_cast<const float*>(data) + at, head_dim * sizeof(float));
      return;
    case KvDType::kF16:
      for (int64_t d = 0; d < head_dim; ++d)
        x[d] = Fp16ToFp32(static_cast<const uint16_t*>(data)[at + d]);
      return;
    case KvDType::kBF16:
      for (int64_t d = 0; d < head_dim; ++d)
        x[d] = Bf16ToFp32(static_cast<const uint16_t*>(data)[at + d]);
      return;
    case KvDType::kI8:
      for (int64_t d = 0; d < head_dim; ++d)
        x[d] = static_cast<float>(static_cast<const int8_t*>(data)[at + d]) * scales[r];
      return;
    case KvDType::kE4M3:
      for (int64_t d = 0; d < head_dim; ++d)
        x[d] = E4m3ToFp32(static_cast<const uint8_t*>(data)[at + d]) * scales[r];
      return;
    case KvDType::kKivi4:
    case KvDType::kKivi2:
      return;  // not a row format: DequantizeKvPageRowRef
  }
}

int KiviBits(KvDType dtype) {
  return dtype == KvDType::kKivi4 ? 4 : dtype == KvDType::kKivi2 ? 2 : 0;
}

namespace {

KiviSection KiviParts(const void* section, int bits, int64_t params, int64_t head_dim) {
  const auto* half = static_cast<const uint16_t*>(section);
  return {.scale = half,
          .zero = half + params,
          .codes = reinterpret_cast<const uint8_t*>(half + 2 * params),
          .row_bytes = (head_dim * bits + 7) / 8};
}

// x[c] = code·scale[c] + zero[c] (one fused multiply-add, as core/kvpage decodes), the scale and
// zero of channel c at scale[c · stride / step] (keys: per channel, values: per 32 channels).
void KiviRowRef(float* x, const KiviSection& s, int bits, int64_t r, int64_t param0,
                bool per_channel, int64_t head_dim) {
  const int mask = (1 << bits) - 1;
  const uint8_t* row = s.codes + r * s.row_bytes;
  for (int64_t c = 0; c < head_dim; ++c) {
    const int64_t p = param0 + (per_channel ? c : c / kKiviGroup);
    const int code = (row[c * bits / 8] >> ((c * bits) % 8)) & mask;
    x[c] = std::fma(static_cast<float>(code), Fp16ToFp32(s.scale[p]), Fp16ToFp32(s.zero[p]));
  }
}

}  // namespace

KiviSection KiviKeys(const void* section, int bits, int64_t rows, int64_t head_dim) {
  return KiviParts(section, bits, (rows + kKiviGroup - 1) / kKiviGroup * head_dim, head_dim);
}

KiviSection KiviValues(const void* section, int bits, int64_t rows, int64_t head_dim) {
  return KiviParts(section, bits, rows * ((head_dim + kKiviGroup - 1) / kKiviGroup), head_dim);
}

void DequantizeKvPageRowRef(float* k, float* v, const KvPageView& p, int64_t r, int64_t head_dim) {
  const int bits = KiviBits(p.dtype);
  if (bits == 0) {
    DequantizeKvRowRef(k, p.dtype, p.k, p.k_scale, r, head_dim);
    DequantizeKvRowRef(v, p.dtype, p.v, p.v_scale, r, head_dim);
    return;
  }
  const int64_t gc = (head_dim + kKiviGroup - 1) / kKiviGroup;
  KiviRowRef(k, KiviKeys(p.k, bits, p.rows, head_dim), bits, r, r / kKiviGroup * head_dim,
             /*per_channel=*/true, head_dim);
  KiviRowRef(v, KiviValues(p.v, bits, p.rows, head_dim), bits, r, r * gc, /*per_channel=*/false,
             head_dim);
}

void AttendPagedRef(float* out, const float* q, const int32_t* q_pos,
                    std::span<const KvPageView> pages, float scale, int64_t n_q, int64_t head_dim) {
  std::vector<float> k, v, scratch;
  std::vector<int32_t> pos;
  for (const KvPageView& p : pages) {
    for (int64_t r = 0; r < p.rows; ++r) {
      k.resize(k.size() + head_dim);
      v.resize(v.size() + head_dim);
      DequantizeKvPageRowRef(k.data() + k.size() - head_dim, v.data() + v.size() - head_dim, p, r,
                             head_dim);
      pos.push_back(p.pos[r]);
    }
  }
  scratch.resize(pos.size() + 1);
  AttendRaggedRef(out, q, q_pos, k.data(), v.data(), pos.data(), scale, scratch.data(), n_q,
                  static_cast<int64_t>(pos.size()), head_dim);
}

}  // namespace internal

#ifdef GLIMPSE_KERNELS_AVX2
namespace {

constexpr int64_t KT = 16;  // keys per tile
constexpr int QB = 4;       // query rows per block

// x[8] from 8 E4M3 codes, divided by 256: as fp16 bits, (code & 0x7F) << 7 puts exponent and
// mantissa in place with fp16's bias 15 instead of 7 (2^−8 too small, subnormals included; RowScale
// multiplies by 256), and 0x7F (NaN) gets exponent 31.
inline __m256 E4m3x8(const uint8_t* codes) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m128i em = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  __m128i h = _mm_or_si128(_mm_slli_epi16(em, 7),
                           _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  h = _mm_or_si128(
      h, _mm_and_si128(_mm_cmpeq_epi16(em, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7C00)));
  return _mm256_cvtph_ps(h);
}

// Eight elements of a page's keys or values from element `at`, before the row's scale (int8: the
// codes; fp8: the value / (scale · 256)).
template <KvDType D>
inline __m256 LoadRaw8(const void* data, int64_t at) {
  if constexpr (D == KvDType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(data) + at);
  } else if constexpr (D == KvDType::kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + at)));
  } else if constexpr (D == KvDType::kBF16) {
    const __m256i w = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + at)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (D == KvDType::kI8) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(data) + at))));
  } else {
    return E4m3x8(static_cast<const uint8_t*>(data) + at);
  }
}

// The factor LoadRaw8's elements of row r take (1 for unscaled formats).
template <KvDType D>
inline float RowScale(const float* scales, int64_t r) {
  if constexpr (D == KvDType::kI8) return scales[r];
  if constexpr (D == KvDType::kE4M3) return scales[r] * 256.0f;
  return 1.0f;
}

template <KvDType D>
void DequantizeKvRowAs(float* x, const void* data, const float* scales, int64_t r,
                       int64_t head_dim) {
  const __m256 s = _mm256_set1_ps(RowScale<D>(scales, r));
  for (int64_t d = 0; d < head_dim; d += 8) {
    _mm256_storeu_ps(x + d, _mm256_mul_ps(LoadRaw8<D>(data, r * head_dim + d), s));
  }
}

// DequantizeKvRow for a row format and head_dim % 8 == 0.
void DequantizeKvRowAvx2(float* x, KvDType dtype, const void* data, const float* scales, int64_t r,
                         int64_t head_dim) {
  switch (dtype) {
    case KvDType::kF32:
      return DequantizeKvRowAs<KvDType::kF32>(x, data, scales, r, head_dim);
    case KvDType::kF16:
      return DequantizeKvRowAs<KvDType::kF16>(x, data, scales, r, head_dim);
    case KvDType::kBF16:
      return DequantizeKvRowAs<KvDType::kBF16>(x, data, scales, r, head_dim);
    case KvDType::kI8:
      return DequantizeKvRowAs<KvDType::kI8>(x, data, scales, r, head_dim);
    case KvDType::kE4M3:
      return DequantizeKvRowAs<KvDType::kE4M3>(x, data, scales, r, head_dim);
    case KvDType::kKivi4:
    case KvDType::kKivi2:
      return;  // not a row format: DequantizeKiviRowAvx2
  }
}

// Eight fp16 values → fp32.
inline __m256 Half8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// Codes of channels d .. d + 8 (d a multiple of 8) of a packed KIVI row, as floats.
template <int BITS>
inline __m256 KiviCodes8(const uint8_t* row, int64_t d) {
  uint32_t word = 0;
  std::memcpy(&word, row + d * BITS / 8, BITS);  // 8 codes of BITS bits: BITS bytes
  const __m256i shifts = BITS == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)
                                   : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), shifts),
                                         _mm256_set1_epi32((1 << BITS) - 1));
  return _mm256_cvtepi32_ps(codes);
}

// Row r of a KIVI page, code·scale + zero by fused multiply-add as core/kvpage decodes.
template <int BITS>
void DequantizeKiviRowAvx2(float* k, float* v, const KvPageView& p, int64_t r, int64_t head_dim) {
  const internal::KiviSection ks = internal::KiviKeys(p.k, BITS, p.rows, head_dim);
  const internal::KiviSection vs = internal::KiviValues(p.v, BITS, p.rows, head_dim);
  const int64_t key_params = r / internal::kKiviGroup * head_dim;
  const int64_t gc = (head_dim + internal::kKiviGroup - 1) / internal::kKiviGroup;
  for (int64_t d = 0; d < head_dim; d += 8) {
    _mm256_storeu_ps(
        k + d, _mm256_fmadd_ps(KiviCodes8<BITS>(ks.codes + r * ks.row_bytes, d),
                               Half8(ks.scale + key_params + d), Half8(ks.zero + key_params + d)));
    const int64_t at = r * gc + d / internal::kKiviGroup;
    _mm256_storeu_ps(v + d, _mm256_fmadd_ps(KiviCodes8<BITS>(vs.codes + r * vs.row_bytes, d),
                                            _mm256_set1_ps(Fp16ToFp32(vs.scale[at])),
                                            _mm256_set1_ps(Fp16ToFp32(vs.zero[at]))));
  }
}

// DequantizeKvPageRow for head_dim % 8 == 0.
void DequantizeKvPageRowAvx2(float* k, float* v, const KvPageView& p, int64_t r, int64_t head_dim) {
  switch (p.dtype) {
    case KvDType::kKivi4:
      return DequantizeKiviRowAvx2<4>(k, v, p, r, head_dim);
    case KvDType::kKivi2:
      return DequantizeKiviRowAvx2<2>(k, v, p, r, head_dim);
    default:
      DequantizeKvRowAvx2(k, p.dtype, p.k, p.k_scale, r, head_dim);
      DequantizeKvRowAvx2(v, p.dtype, p.v, p.v_scale, r, head_dim);
  }
}

// Up to KT rows of one page, dequantised: keys transposed, values row-major, positions. Rows past
// `rows` are zero with position INT32_MAX, so they are never visible.
struct Tile {
  std::vector<float> kt;   // [head_dim, KT]
  std::vector<float> v;    // [KT, head_dim]
  std::vector<float> row;  // [head_dim] one dequantised key
  alignas(32) int32_t pos[KT];
  int32_t min_pos = 0;
  int64_t rows = 0;
};

void LoadTile(Tile& t, const KvPageView& p, int64_t r0, int64_t head_dim) {
  t.rows = std::min(KT, p.rows - r0);
  t.kt.resize(head_dim * KT);
  t.v.resize(KT * head_dim);
  t.row.resize(head_dim);
  t.min_pos = std::numeric_limits<int32_t>::max();
  for (int64_t c = 0; c < KT; ++c) {
    t.pos[c] = c < t.rows ? p.pos[r0 + c] : std::numeric_limits<int32_t>::max();
    t.min_pos = std::min(t.min_pos, t.pos[c]);
  }
  for (int64_t c = 0; c < t.rows; ++c) {
    DequantizeKvPageRowAvx2(t.row.data(), t.v.data() + c * head_dim, p, r0 + c, head_dim);
    for (int64_t d = 0; d < head_dim; ++d) t.kt[d * KT + c] = t.row[d];
  }
  for (int64_t c = t.rows; c < KT; ++c) {
    for (int64_t d = 0; d < head_dim; ++d) t.kt[d * KT + c] = 0.0f;
  }
}

// Online-softmax state of every query row: o [n_q, head_dim] unnormalised, running max and sum.
struct State {
  std::vector<float> o, m, l;
  void Reset(int64_t n_q, int64_t head_dim) {
    o.assign(n_q * head_dim, 0.0f);
    m.assign(n_q, -INFINITY);
    l.assign(n_q, 0.0f);
  }
};

// Updates rows [r0, r0 + NR) with one tile.
template <int NR>
void UpdateRows(State& st, int64_t r0, const float* q, const int32_t* q_pos, const Tile& t,
                float scale, int64_t head_dim) {
  int32_t max_pos = std::numeric_limits<int32_t>::min();
  for (int r = 0; r < NR; ++r) max_pos = std::max(max_pos, q_pos[r0 + r]);
  if (t.min_pos > max_pos) return;
  // S[r, 0..16) = q_r · K_tileᵀ · scale.
  __m256 s[NR][2];
  for (int r = 0; r < NR; ++r) s[r][0] = s[r][1] = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; ++d) {
    const __m256 k0 = _mm256_loadu_ps(t.kt.data() + d * KT);
    const __m256 k1 = _mm256_loadu_ps(t.kt.data() + d * KT + 8);
    for (int r = 0; r < NR; ++r) {
      const __m256 qd = _mm256_broadcast_ss(q + (r0 + r) * head_dim + d);
      s[r][0] = _mm256_fmadd_ps(qd, k0, s[r][0]);
      s[r][1] = _mm256_fmadd_ps(qd, k1, s[r][1]);
    }
  }
  const __m256i pos0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.pos));
  const __m256i pos1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.pos + 8));
  const __m256 vscale = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY);
  alignas(32) float p[NR][KT];
  bool any = false;
  for (int r = 0; r < NR; ++r) {
    float& m = st.m[r0 + r];
    float* o = st.o.data() + (r0 + r) * head_dim;
    // hidden = kv_pos > q_pos; hidden scores become −inf and their weights exactly 0.
    const __m256i qp = _mm256_set1_epi32(q_pos[r0 + r]);
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
    if (tile_max > m) {
      const float alpha = std::exp(m - tile_max);  // 0 on the first visible tile
      st.l[r0 + r] *= alpha;
      for (int64_t d = 0; d < head_dim; d += 8) {
        _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), _mm256_set1_ps(alpha)));
      }
      m = tile_max;
    }
    const __m256 vm = _mm256_set1_ps(m);
    const __m256 p0 = _mm256_andnot_ps(hidden0, internal::Exp(_mm256_sub_ps(s0, vm)));
    const __m256 p1 = _mm256_andnot_ps(hidden1, internal::Exp(_mm256_sub_ps(s1, vm)));
    st.l[r0 + r] += internal::HorizontalSum(_mm256_add_ps(p0, p1));
    _mm256_store_ps(p[r], p0);
    _mm256_store_ps(p[r] + 8, p1);
  }
  if (!any) return;
  // o[r] += Σ_j p[r][j] · v_j over the tile's rows.
  for (int64_t d = 0; d < head_dim; d += 8) {
    __m256 acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_loadu_ps(st.o.data() + (r0 + r) * head_dim + d);
    for (int64_t j = 0; j < t.rows; ++j) {
      const __m256 vj = _mm256_loadu_ps(t.v.data() + j * head_dim + d);
      for (int r = 0; r < NR; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[r][j]), vj, acc[r]);
    }
    for (int r = 0; r < NR; ++r) _mm256_storeu_ps(st.o.data() + (r0 + r) * head_dim + d, acc[r]);
  }
}

void AttendPagedAvx2(float* out, const float* q, const int32_t* q_pos,
                     std::span<const KvPageView> pages, float scale, int64_t n_q,
                     int64_t head_dim) {
  // Per-thread buffers reused across calls.
  thread_local Tile tile;
  thread_local State st;
  st.Reset(n_q, head_dim);
  const int32_t max_q_pos =
      n_q > 0 ? *std::max_element(q_pos, q_pos + n_q) : std::numeric_limits<int32_t>::min();
  for (const KvPageView& page : pages) {
    for (int64_t r0 = 0; r0 < page.rows; r0 += KT) {
      // A tile wholly in every row's future is not even dequantised.
      bool visible = false;
      for (int64_t c = r0; c < std::min(page.rows, r0 + KT) && !visible; ++c) {
        visible = page.pos[c] <= max_q_pos;
      }
      if (!visible) continue;
      LoadTile(tile, page, r0, head_dim);
      int64_t i = 0;
      for (; i + QB <= n_q; i += QB) UpdateRows<QB>(st, i, q, q_pos, tile, scale, head_dim);
      for (; i < n_q; ++i) UpdateRows<1>(st, i, q, q_pos, tile, scale, head_dim);
    }
  }
  for (int64_t i = 0; i < n_q; ++i) {
    const float inv = st.l[i] > 0.0f ? 1.0f / st.l[i] : 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) out[i * head_dim + d] = st.o[i * head_dim + d] * inv;
  }
}

// Decode-sized attention (n_q ≤ kFewRows query rows, e.g. one token's query heads of a kv head):
// keys and values are read straight from the pages and dequantised in registers, 8 keys at a
// time, one query row after the other (a page is read once per row, from cache after the first).
// Tiling as above would dequantise, transpose and copy every key and value for a handful of rows.
// Same online softmax; the scale of int8/fp8 rows is applied to the 8 scores and folded into the
// 8 value weights instead of every element; a KIVI group's key scale and zero are folded into the
// query (q·k = Σ (q·scale)·code + q·zero), its value scale and zero into the weights.
constexpr int64_t kFewRows = 8;

// Per-row factors of keys j0 .. j0 + n of a page, 8 lanes (lanes past n are masked by their
// callers): all 1 for unscaled formats.
template <KvDType D>
inline __m256 RowScales8(const float* scales, int64_t j0, int64_t n) {
  if constexpr (D == KvDType::kI8 || D == KvDType::kE4M3) {
    alignas(32) float f[8] = {};
    for (int64_t j = 0; j < n; ++j) f[j] = RowScale<D>(scales, j0 + j);
    return _mm256_load_ps(f);
  } else {
    return _mm256_set1_ps(1.0f);
  }
}

// Lane j = the sum of acc[j]'s lanes.
inline __m256 Reduce8(const __m256 acc[8]) {
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores q · k_j of keys j0 .. j0 + n (n ≤ 8; lanes past n are 0).
template <KvDType D, int N>
inline __m256 Scores8(const float* q, const KvPageView& p, int64_t j0, int64_t n,
                      int64_t head_dim) {
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  const int64_t count = N == 8 ? 8 : n;
  for (int64_t d = 0; d < head_dim; d += 8) {
    const __m256 qd = _mm256_loadu_ps(q + d);
    for (int64_t j = 0; j < count; ++j) {
      acc[j] = _mm256_fmadd_ps(qd, LoadRaw8<D>(p.k, (j0 + j) * head_dim + d), acc[j]);
    }
  }
  return Reduce8(acc);
}

// One query row's online-softmax state: o [head_dim] unnormalised until the end.
struct RowAcc {
  float* o = nullptr;
  float m = -INFINITY, l = 0.0f;
};

// Folds 8 scores (already scaled; hidden lanes −inf, not all of them) into the row's running
// maximum and sum, rescaling o when the maximum grows; returns the 8 weights e^{s_j − m} (0 where
// hidden).
inline __m256 Softmax8(RowAcc& a, __m256 s, __m256 hidden, int64_t head_dim) {
  const float tile_max = internal::HorizontalMax(s);
  if (tile_max > a.m) {
    const float alpha = std::exp(a.m - tile_max);  // 0 on the first visible keys
    a.l *= alpha;
    for (int64_t d = 0; d < head_dim; d += 8) {
      _mm256_storeu_ps(a.o + d, _mm256_mul_ps(_mm256_loadu_ps(a.o + d), _mm256_set1_ps(alpha)));
    }
    a.m = tile_max;
  }
  const __m256 pr = _mm256_andnot_ps(hidden, internal::Exp(_mm256_sub_ps(s, _mm256_set1_ps(a.m))));
  a.l += internal::HorizontalSum(pr);
  return pr;
}

// Lanes of keys j0 .. j0 + n whose position is after q_pos (lanes past n too).
inline __m256 Hidden8(const int32_t* positions, int64_t j0, int64_t n, __m256i qp) {
  alignas(32) int32_t pos[8];
  for (int64_t j = 0; j < 8; ++j) {
    pos[j] = j < n ? positions[j0 + j] : std::numeric_limits<int32_t>::max();
  }
  return _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(pos)), qp));
}

// One row-format page into one query row's state.
template <KvDType D>
void FewRowsPage(RowAcc& a, const float* qi, __m256i qp, const KvPageView& p, float scale,
                 int64_t head_dim) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  for (int64_t j0 = 0; j0 < p.rows; j0 += 8) {
    const int64_t n = std::min<int64_t>(8, p.rows - j0);
    const __m256 hidden = Hidden8(p.pos, j0, n, qp);
    if (_mm256_movemask_ps(hidden) == 0xFF) continue;
    const __m256 k_scales = RowScales8<D>(p.k_scale, j0, n);
    __m256 s =
        n == 8 ? Scores8<D, 8>(qi, p, j0, n, head_dim) : Scores8<D, 0>(qi, p, j0, n, head_dim);
    s = _mm256_blendv_ps(_mm256_mul_ps(s, _mm256_mul_ps(k_scales, _mm256_set1_ps(scale))), neg_inf,
                         hidden);
    const __m256 pr = Softmax8(a, s, hidden, head_dim);
    alignas(32) float w[8];  // value weights: p_j times the value row's scale
    _mm256_store_ps(w, _mm256_mul_ps(pr, RowScales8<D>(p.v_scale, j0, n)));
    for (int64_t d = 0; d < head_dim; d += 8) {
      __m256 acc = _mm256_loadu_ps(a.o + d);
      for (int64_t j = 0; j < n; ++j) {
        acc = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), LoadRaw8<D>(p.v, (j0 + j) * head_dim + d), acc);
      }
      _mm256_storeu_ps(a.o + d, acc);
    }
  }
}

// One KIVI page into one query row's state. Keys j0 .. j0 + 8 share a key group (8 divides 32).
template <int BITS>
void FewRowsKiviPage(RowAcc& a, const float* qi, __m256i qp, const KvPageView& p, float scale,
                     int64_t head_dim) {
  const internal::KiviSection ks = internal::KiviKeys(p.k, BITS, p.rows, head_dim);
  const internal::KiviSection vs = internal::KiviValues(p.v, BITS, p.rows, head_dim);
  const int64_t gc = (head_dim + internal::kKiviGroup - 1) / internal::kKiviGroup;
  thread_local std::vector<float> qs, wa, wb;  // q·scale of the group; value weights per group
  qs.resize(head_dim);
  wa.resize(8 * gc);
  wb.resize(gc);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  int64_t group = -1;
  float qz = 0.0f;  // q · zero of the group
  for (int64_t j0 = 0; j0 < p.rows; j0 += 8) {
    const int64_t n = std::min<int64_t>(8, p.rows - j0);
    const __m256 hidden = Hidden8(p.pos, j0, n, qp);
    if (_mm256_movemask_ps(hidden) == 0xFF) continue;
    if (j0 / internal::kKiviGroup != group) {
      group = j0 / internal::kKiviGroup;
      __m256 z = _mm256_setzero_ps();
      for (int64_t d = 0; d < head_dim; d += 8) {
        const __m256 qd = _mm256_loadu_ps(qi + d);
        _mm256_storeu_ps(qs.data() + d, _mm256_mul_ps(qd, Half8(ks.scale + group * head_dim + d)));
        z = _mm256_fmadd_ps(qd, Half8(ks.zero + group * head_dim + d), z);
      }
      qz = internal::HorizontalSum(z);
    }
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += 8) {
      const __m256 qd = _mm256_loadu_ps(qs.data() + d);
      for (int64_t j = 0; j < n; ++j) {
        acc[j] =
            _mm256_fmadd_ps(qd, KiviCodes8<BITS>(ks.codes + (j0 + j) * ks.row_bytes, d), acc[j]);
      }
    }
    __m256 s = _mm256_add_ps(Reduce8(acc), _mm256_set1_ps(qz));
    s = _mm256_blendv_ps(_mm256_mul_ps(s, _mm256_set1_ps(scale)), neg_inf, hidden);
    alignas(32) float w[8];
    _mm256_store_ps(w, Softmax8(a, s, hidden, head_dim));
    // v_j = code·scale_g + zero_g per channel group g: Σ_j w_j·v_j = Σ_j (w_j·scale_jg)·code_j
    // + Σ_j w_j·zero_jg.
    std::fill(wb.begin(), wb.end(), 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t g = 0; g < gc; ++g) {
        const int64_t at = (j0 + j) * gc + g;
        wa[j * gc + g] = w[j] * Fp16ToFp32(vs.scale[at]);
        wb[g] += w[j] * Fp16ToFp32(vs.zero[at]);
      }
    }
    for (int64_t d = 0; d < head_dim; d += 8) {
      const int64_t g = d / internal::kKiviGroup;
      __m256 o = _mm256_add_ps(_mm256_loadu_ps(a.o + d), _mm256_set1_ps(wb[g]));
      for (int64_t j = 0; j < n; ++j) {
        o = _mm256_fmadd_ps(_mm256_set1_ps(wa[j * gc + g]),
                            KiviCodes8<BITS>(vs.codes + (j0 + j) * vs.row_bytes, d), o);
      }
      _mm256_storeu_ps(a.o + d, o);
    }
  }
}

void FewRowsAnyPage(RowAcc& a, const float* qi, __m256i qp, const KvPageView& p, float scale,
                    int64_t head_dim) {
  switch (p.dtype) {
    case KvDType::kF32:
      return FewRowsPage<KvDType::kF32>(a, qi, qp, p, scale, head_dim);
    case KvDType::kF16:
      return FewRowsPage<KvDType::kF16>(a, qi, qp, p, scale, head_dim);
    case KvDType::kBF16:
      return FewRowsPage<KvDType::kBF16>(a, qi, qp, p, scale, head_dim);
    case KvDType::kI8:
      return FewRowsPage<KvDType::kI8>(a, qi, qp, p, scale, head_dim);
    case KvDType::kE4M3:
      return FewRowsPage<KvDType::kE4M3>(a, qi, qp, p, scale, head_dim);
    case KvDType::kKivi4:
      return FewRowsKiviPage<4>(a, qi, qp, p, scale, head_dim);
    case KvDType::kKivi2:
      return FewRowsKiviPage<2>(a, qi, qp, p, scale, head_dim);
  }
}

void AttendFewRowsAvx2(float* out, const float* q, const int32_t* q_pos,
                       std::span<const KvPageView> pages, float scale, int64_t n_q,
                       int64_t head_dim) {
  for (int64_t i = 0; i < n_q; ++i) {
    RowAcc a{.o = out + i * head_dim};
    std::fill(a.o, a.o + head_dim, 0.0f);
    const __m256i qp = _mm256_set1_epi32(q_pos[i]);
    for (const KvPageView& p : pages) FewRowsAnyPage(a, q + i * head_dim, qp, p, scale, head_dim);
    const float inv = a.l > 0.0f ? 1.0f / a.l : 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) a.o[d] *= inv;
  }
}

// Few query rows read the pages directly; more share dequantised tiles.
void AttendAvx2(float* out, const float* q, const int32_t* q_pos, std::span<const KvPageView> pages,
                float scale, int64_t n_q, int64_t head_dim) {
  if (n_q <= kFewRows) return AttendFewRowsAvx2(out, q, q_pos, pages, scale, n_q, head_dim);
  AttendPagedAvx2(out, q, q_pos, pages, scale, n_q, head_dim);
}

}  // namespace
#endif  // GLIMPSE_KERNELS_AVX2

void DequantizeKvPageRow(float* k, float* v, const KvPageView& page, int64_t r, int64_t head_dim) {
#ifdef GLIMPSE_KERNELS_AVX2
  if (head_dim % 8 == 0) return DequantizeKvPageRowAvx2(k, v, page, r, head_dim);
#endif
  internal::DequantizeKvPageRowRef(k, v, page, r, head_dim);
}

void AttendPaged(float* out, const float* q, const int32_t* q_pos,
                 std::span<const KvPageView> pages, float scale, int64_t n_q, int64_t head_dim) {
#ifdef GLIMPSE_KERNELS_AVX2
  if (head_dim % 8 == 0) return AttendAvx2(out, q, q_pos, pages, scale, n_q, head_dim);
#endif
  internal::AttendPagedRef(out, q, q_pos, pages, scale, n_q, head_dim);
}

void AttendRagged(float* out, const float* q, const int32_t* q_pos, const float* k, const float* v,
                  const int32_t* kv_pos, float scale, float* scratch, int64_t n_q, int64_t n_kv,
                  int64_t head_dim) {
#ifdef GLIMPSE_KERNELS_AVX2
  if (head_dim % 8 == 0) {
    const KvPageView page{.k = k, .v = v, .pos = kv_pos, .rows = n_kv};
    return AttendAvx2(out, q, q_pos, std::span(&page, 1), scale, n_q, head_dim);
  }
#endif
  internal::AttendRaggedRef(out, q, q_pos, k, v, kv_pos, scale, scratch, n_q, n_kv, head_dim);
}

}  // namespace glimpse::kernels
