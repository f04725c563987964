// AVX2 + FMA + F16C fast paths for quant.h, tested element-wise against the references in
// quant.cc. The integer dot products follow GGML's x86 scheme (ggml-cpu/arch/x86/quants.c):
// unpack nibbles to bytes, multiply u8×s8 pairs with vpmaddubsw, widen with vpmaddwd, scale the
// 8 int32 lanes by the block's d_w·d_x in fp32.
#include "kernels/cpu/quant_internal.h"
#include "kernels/cpu/simd.h"

#ifdef GLIMPSE_KERNELS_AVX2

#include <immintrin.h>

#include <cstring>

namespace glimpse::kernels::internal {
namespace {

float Half(uint16_t h) { return _cvtsh_ss(h); }

// 16 bytes of nibbles → 32 bytes in [0, 15]: low nibbles in lanes 0..15, high in 16..31 (the
// element order of GGML's 4-bit blocks).
__m256i UnpackNibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// 8 int32 lanes summing to Σ u[j]·s[j] for u8 `u` (≤ 127 so no saturation) and s8 `s`.
__m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Same for two signed operands: |a| · (b with a's sign).
__m256i DotS8S8(__m256i a, __m256i b) {
  return DotU8S8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

__m256i LoadQ8(const int8_t* qs) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
}

// Eight consecutive bytes → 8 fp32 lanes.
__m256 BytesToFloat(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__m256 SBytesToFloat(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

__m256 LoadBf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
__m256 LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Dequantise one 4-bit block: out[j] = d·nib[j] + bias (bias = m for Q4_1, −8·d for Q4_0).
void DequantNibbles(float* out, const uint8_t* qs, float d, float bias) {
  alignas(32) uint8_t bytes[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), UnpackNibbles(qs));
  const __m256 vd = _mm256_set1_ps(d), vb = _mm256_set1_ps(bias);
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(out + 8 * k, _mm256_fmadd_ps(vd, BytesToFloat(bytes + 8 * k), vb));
  }
}

template <typename Load>
float DotPlain(const uint16_t* w, const float* x, int64_t n, Load load) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(load(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), acc0);
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) {
    alignas(32) uint16_t one[8] = {w[i]};
    sum += _mm256_cvtss_f32(load(one)) * x[i];
  }
  return sum;
}

float DotF32(const float* w, const float* x, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] =
          _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * k), _mm256_loadu_ps(x + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc[0]);
  float sum =
      HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

float DotQ8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i p0 = DotS8S8(LoadQ8(w[b].qs), LoadQ8(x[b].qs));
    const __m256i p1 = DotS8S8(LoadQ8(w[b + 1].qs), LoadQ8(x[b + 1].qs));
    acc0 =
        _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].d) * Half(x[b].d)), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b + 1].d) * Half(x[b + 1].d)),
                           _mm256_cvtepi32_ps(p1), acc1);
  }
  for (; b < nb; ++b) {
    const __m256i p = DotS8S8(LoadQ8(w[b].qs), LoadQ8(x[b].qs));
    acc0 =
        _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].d) * Half(x[b].d)), _mm256_cvtepi32_ps(p), acc0);
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

float DotQ4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i q0 = _mm256_sub_epi8(UnpackNibbles(w[b].qs), eight);
    const __m256i q1 = _mm256_sub_epi8(UnpackNibbles(w[b + 1].qs), eight);
    const __m256i p0 = DotS8S8(q0, LoadQ8(x[b].qs));
    const __m256i p1 = DotS8S8(q1, LoadQ8(x[b + 1].qs));
    acc0 =
        _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].d) * Half(x[b].d)), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b + 1].d) * Half(x[b + 1].d)),
                           _mm256_cvtepi32_ps(p1), acc1);
  }
  for (; b < nb; ++b) {
    const __m256i p = DotS8S8(_mm256_sub_epi8(UnpackNibbles(w[b].qs), eight), LoadQ8(x[b].qs));
    acc0 =
        _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].d) * Half(x[b].d)), _mm256_cvtepi32_ps(p), acc0);
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

// Σ_b d_w·d_x·Σ nib·q + m_w·d_x·Σ q. Both integer sums come from vpmaddubsw: nib·q directly
// (nibbles are unsigned), Σ q as 1·q.
float DotQ4_1(const BlockQ4_1* w, const BlockQ8_0* x, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi8(1);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i qx0 = LoadQ8(x[b].qs), qx1 = LoadQ8(x[b + 1].qs);
    const __m256i p0 = DotU8S8(UnpackNibbles(w[b].qs), qx0);
    const __m256i p1 = DotU8S8(UnpackNibbles(w[b + 1].qs), qx1);
    const float dx0 = Half(x[b].d), dx1 = Half(x[b + 1].d);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].d) * dx0), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b + 1].d) * dx1), _mm256_cvtepi32_ps(p1), acc1);
    // m·d_x·Σq for both blocks: 16-bit pair sums of q, weighted per block, in one vpmaddwd.
    const __m256i s0 = _mm256_maddubs_epi16(ones, qx0), s1 = _mm256_maddubs_epi16(ones, qx1);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].m) * dx0),
                            _mm256_cvtepi32_ps(_mm256_madd_epi16(s0, _mm256_set1_epi16(1))), acc_m);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b + 1].m) * dx1),
                            _mm256_cvtepi32_ps(_mm256_madd_epi16(s1, _mm256_set1_epi16(1))), acc_m);
  }
  for (; b < nb; ++b) {
    const __m256i qx = LoadQ8(x[b].qs);
    const __m256i p = DotU8S8(UnpackNibbles(w[b].qs), qx);
    const __m256i s = DotU8S8(ones, qx);
    const float dx = Half(x[b].d);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].d) * dx), _mm256_cvtepi32_ps(p), acc0);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(Half(w[b].m) * dx), _mm256_cvtepi32_ps(s), acc_m);
  }
  return HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), acc_m));
}

// roundf (half away from zero) of integral-range floats: trunc(v) + sign(v)·(|v − trunc(v)| ≥ ½).
__m256 RoundHalfAway(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 frac = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(v, t));
  const __m256 up =
      _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_or_ps(up, _mm256_and_ps(v, sign_bit)));
}

}  // namespace

void DequantizeRowAvx2(float* out, const void* in, DType type, int64_t n) {
  const int64_t nb = n / QK;
  switch (type) {
    case DType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadF16(h + i));
      for (; i < n; ++i) out[i] = _cvtsh_ss(h[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadBf16(h + i));
      for (; i < n; ++i) out[i] = Bf16ToFp32(h[i]);
      return;
    }
    case DType::kQ8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(in)[b];
        const __m256 d = _mm256_set1_ps(Half(blk.d));
        for (int k = 0; k < 4; ++k) {
          _mm256_storeu_ps(out + b * QK + 8 * k, _mm256_mul_ps(d, SBytesToFloat(blk.qs + 8 * k)));
        }
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(in)[b];
        const float d = Half(blk.d);
        // d·(nib − 8) == d·nib + (−8·d) exactly: −8·d is exact and so is the sum's rounding.
        DequantNibbles(out + b * QK, blk.qs, d, -8.0f * d);
      }
      return;
    case DType::kQ4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ4_1& blk = static_cast<const BlockQ4_1*>(in)[b];
        DequantNibbles(out + b * QK, blk.qs, Half(blk.d), Half(blk.m));
      }
      return;
    case DType::kF32:
      break;
  }
  DequantizeRowRef(out, in, type, n);
}

void QuantizeRowQ8_0Avx2(void* out, const float* x, int64_t n) {
  BlockQ8_0* blocks = static_cast<BlockQ8_0*>(out);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / QK; ++b) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + b * QK + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(RoundHalfAway(_mm256_mul_ps(v[k], vid)));
    // Packing interleaves 128-bit lanes; the permute restores element order.
    const __m256i q16 =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i q8 = _mm256_permutevar8x32_epi32(q16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].qs), q8);
  }
}

float DotRowAvx2(const void* w_row, DType type, const void* x, int64_t n) {
  const BlockQ8_0* xq = static_cast<const BlockQ8_0*>(x);
  const float* xf = static_cast<const float*>(x);
  switch (type) {
    case DType::kF32:
      return DotF32(static_cast<const float*>(w_row), xf, n);
    case DType::kF16:
      return DotPlain(static_cast<const uint16_t*>(w_row), xf, n, LoadF16);
    case DType::kBF16:
      return DotPlain(static_cast<const uint16_t*>(w_row), xf, n, LoadBf16);
    case DType::kQ8_0:
      return DotQ8_0(static_cast<const BlockQ8_0*>(w_row), xq, n / QK);
    case DType::kQ4_0:
      return DotQ4_0(static_cast<const BlockQ4_0*>(w_row), xq, n / QK);
    case DType::kQ4_1:
      return DotQ4_1(static_cast<const BlockQ4_1*>(w_row), xq, n / QK);
  }
  return 0.0f;
}

}  // namespace glimpse::kernels::internal

#endif  // GLIMPSE_KERNELS_AVX2
