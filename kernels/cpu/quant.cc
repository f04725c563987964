// GGML block formats: sizes, fp16/bf16 conversions, dequantisation and the weight × fp32 row dot
// products behind DotRow. Each op has a scalar reference here (GGML's reference
// loops, ggml-quants.c / ggml-cpu/quants.c) and dispatches to the AVX2 fast path in quant_avx2.cc
// where it was compiled in, and for block formats' dot products to quant_avx512.cc where the CPU
// has AVX-512.
#include "kernels/quant.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/cpu/quant_internal.h"

#ifdef GLIMPSE_KERNELS_AVX2
#include <immintrin.h>
#endif

namespace glimpse::kernels {

bool IsSupportedDType(uint32_t ggml_type) {
  switch (static_cast<DType>(ggml_type)) {
    case DType::kF32:
    case DType::kF16:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kBF16:
      return true;
  }
  return false;
}

const char* DTypeName(DType type) {
  switch (type) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_1:
      return "Q4_1";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_K:
      return "Q4_K";
    case DType::kQ5_K:
      return "Q5_K";
    case DType::kQ6_K:
      return "Q6_K";
    case DType::kBF16:
      return "BF16";
  }
  return "unknown";
}

int64_t BlockElems(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
    default:
      return 1;
  }
}

int64_t BlockBytes(DType type) {
  switch (type) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kQ4_0:
      return 18;
    case DType::kQ4_1:
      return 20;
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_K:
      return 144;
    case DType::kQ5_K:
      return 176;
    case DType::kQ6_K:
      return 210;
  }
  return 0;
}

int64_t RowBytes(DType type, int64_t n) { return n / BlockElems(type) * BlockBytes(type); }

float Fp16ToFp32(uint16_t h) {
#ifdef GLIMPSE_KERNELS_AVX2
  return _cvtsh_ss(h);
#else
  return internal::Fp16ToFp32Ref(h);
#endif
}

uint16_t Fp32ToFp16(float f) {
#ifdef GLIMPSE_KERNELS_AVX2
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return internal::Fp32ToFp16Ref(f);
#endif
}

float Bf16ToFp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void DequantizeRow(float* out, const void* in, DType type, int64_t n) {
#ifdef GLIMPSE_KERNELS_AVX2
  internal::DequantizeRowAvx2(out, in, type, n);
#else
  internal::DequantizeRowRef(out, in, type, n);
#endif
}

#ifdef GLIMPSE_KERNELS_AVX512
namespace internal {

bool UseAvx512() {
  static const bool use = [] {
    const char* choice = std::getenv("GLIMPSE_KERNELS");
    if (choice != nullptr && std::string_view(choice) == "avx2") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return use;
}

}  // namespace internal
#endif

void DotRows(float* out, const void* w, int64_t w_stride, int64_t rows, DType type, const float* x,
             int64_t n) {
#ifdef GLIMPSE_KERNELS_AVX512
  if (internal::UseAvx512()) return internal::DotRowsAvx512(out, w, w_stride, rows, type, x, n);
#endif
#ifdef GLIMPSE_KERNELS_AVX2
  internal::DotRowsAvx2(out, w, w_stride, rows, type, x, n);
#else
  internal::DotRowsRef(out, w, w_stride, rows, type, x, n);
#endif
}

void DotRowsTokens(float* out, int64_t out_stride, const void* w, int64_t w_stride, int64_t rows,
                   DType type, const float* x, int64_t m, int64_t n) {
#ifdef GLIMPSE_KERNELS_AVX512
  if (internal::UseAvx512()) {
    return internal::DotRowsTokensAvx512(out, out_stride, w, w_stride, rows, type, x, m, n);
  }
#endif
#ifdef GLIMPSE_KERNELS_AVX2
  internal::DotRowsTokensAvx2(out, out_stride, w, w_stride, rows, type, x, m, n);
#else
  for (int64_t t = 0; t < m; ++t) {
    internal::DotRowsRef(out + t * out_stride, w, w_stride, rows, type, x + t * n, n);
  }
#endif
}

float DotRow(const void* w_row, DType type, const float* x, int64_t n) {
  float out;
  DotRows(&out, w_row, 0, 1, type, x, n);
  return out;
}

namespace internal {

float Fp16ToFp32Ref(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {  // inf, or NaN made quiet as x86's vcvtph2ps does
    bits = sign | 0x7f800000 | (man << 13) | (man ? 0x400000 : 0);
  } else if (exp != 0) {  // normal: rebias 15 → 127
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: man · 2^−24, normalise
    int e = 113;
    while ((man & 0x400) == 0) {
      man <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t Fp32ToFp16Ref(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff);
  uint32_t man = x & 0x7fffff;
  if (exp == 0xff) return sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0);
  const int32_t e = exp - 127 + 15;  // half's biased exponent
  if (e >= 31) return sign | 0x7c00;
  uint32_t h, rem, half;
  if (e <= 0) {  // half subnormal: value = h · 2^−24
    if (e < -10) return sign;
    man |= 0x800000;
    const int shift = 14 - e;
    h = man >> shift;
    rem = man & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    h = (static_cast<uint32_t>(e) << 10) | (man >> 13);
    rem = man & 0x1fff;
    half = 0x1000;
  }
  if (rem > half || (rem == half && (h & 1))) ++h;  // a carry rounds up into the exponent/inf
  return static_cast<uint16_t>(sign | h);
}

namespace {

// One K-quant super-block into y[256] (ggml's dequantize_row_q{4,5,6}_K).
void DequantizeBlockK(float* y, const void* block, DType type) {
  if (type == DType::kQ6_K) {
    const BlockQ6_K& b = *static_cast<const BlockQ6_K*>(block);
    const float d = Fp16ToFp32Ref(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
    return;
  }
  // Q4_K and Q5_K: 4 groups of 64 elements, each two 32-element sub-blocks (low nibbles, then
  // high), Q5_K's fifth bit from qh.
  const bool q5 = type == DType::kQ5_K;
  const BlockQ4_K* b4 = static_cast<const BlockQ4_K*>(block);
  const BlockQ5_K* b5 = static_cast<const BlockQ5_K*>(block);
  const float d = Fp16ToFp32Ref(q5 ? b5->d : b4->d);
  const float dmin = Fp16ToFp32Ref(q5 ? b5->dmin : b4->dmin);
  const uint8_t* scales = q5 ? b5->scales : b4->scales;
  const uint8_t* ql = q5 ? b5->qs : b4->qs;
  for (int g = 0; g < 4; ++g, ql += 32, y += 64) {
    uint8_t sc, m;
    GetScaleMinK4(2 * g, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    GetScaleMinK4(2 * g + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      const int hi1 = q5 ? ((b5->qh[l] >> (2 * g)) & 1) << 4 : 0;
      const int hi2 = q5 ? ((b5->qh[l] >> (2 * g + 1)) & 1) << 4 : 0;
      y[l] = d1 * ((ql[l] & 0xF) + hi1) - m1;
      y[l + 32] = d2 * ((ql[l] >> 4) + hi2) - m2;
    }
  }
}

}  // namespace

void DequantizeRowRef(float* out, const void* in, DType type, int64_t n) {
  switch (type) {
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      for (int64_t b = 0; b < n / QK_K; ++b) {
        DequantizeBlockK(out + b * QK_K, static_cast<const uint8_t*>(in) + b * BlockBytes(type),
                         type);
      }
      return;
    case DType::kF32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFp32Ref(static_cast<const uint16_t*>(in)[i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(static_cast<const uint16_t*>(in)[i]);
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / QK; ++b) {
        const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(in)[b];
        const float d = Fp16ToFp32Ref(blk.d);
        for (int j = 0; j < QK; ++j) out[b * QK + j] = d * blk.qs[j];
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / QK; ++b) {
        const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(in)[b];
        const float d = Fp16ToFp32Ref(blk.d);
        for (int j = 0; j < QK / 2; ++j) {
          out[b * QK + j] = d * ((blk.qs[j] & 0x0f) - 8);
          out[b * QK + j + QK / 2] = d * ((blk.qs[j] >> 4) - 8);
        }
      }
      return;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / QK; ++b) {
        const BlockQ4_1& blk = static_cast<const BlockQ4_1*>(in)[b];
        const float d = Fp16ToFp32Ref(blk.d), m = Fp16ToFp32Ref(blk.m);
        for (int j = 0; j < QK / 2; ++j) {
          out[b * QK + j] = d * (blk.qs[j] & 0x0f) + m;
          out[b * QK + j + QK / 2] = d * (blk.qs[j] >> 4) + m;
        }
      }
      return;
  }
}

namespace {

int Nibble(const uint8_t* qs, int j) { return j < QK / 2 ? qs[j] & 0x0f : qs[j - QK / 2] >> 4; }

// Σ_b d·Σ_j q(blk, j)·x[j] + m(blk)·Σ_j x[j], where `q` decodes the j-th quant of a block and `m`
// its offset (0 for Q8_0, −8·d for Q4_0, m for Q4_1; see quant.h).
template <typename Block, typename Quant, typename Min>
float DotBlocksRef(const Block* w, const float* x, int64_t nb, Quant q, Min m) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * QK;  // [QK]
    float sum_qx = 0.0f, sum_x = 0.0f;
    for (int j = 0; j < QK; ++j) {
      sum_qx += static_cast<float>(q(w[b], j)) * xb[j];
      sum_x += xb[j];
    }
    sum += Fp16ToFp32Ref(w[b].d) * sum_qx + m(w[b]) * sum_x;
  }
  return sum;
}

template <typename Decode>
float DotPlainRef(const uint16_t* w, const float* x, int64_t n, Decode decode) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += decode(w[i]) * x[i];
  return sum;
}

// K-quants: each super-block decoded, then Σ w·x in index order.
float DotKQuantRef(const void* w_row, DType type, const float* x, int64_t n) {
  float w[QK_K];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    DequantizeBlockK(w, static_cast<const uint8_t*>(w_row) + b * BlockBytes(type), type);
    for (int64_t j = 0; j < QK_K; ++j) sum += w[j] * x[b * QK_K + j];
  }
  return sum;
}

float DotRowRef(const void* w_row, DType type, const float* x, int64_t n) {
  const int64_t nb = n / QK;
  const auto no_min = [](const auto&) { return 0.0f; };
  switch (type) {
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DotKQuantRef(w_row, type, x, n);
    case DType::kF32: {
      const float* w = static_cast<const float*>(w_row);
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i];
      return sum;
    }
    case DType::kF16:
      return DotPlainRef(static_cast<const uint16_t*>(w_row), x, n, Fp16ToFp32Ref);
    case DType::kBF16:
      return DotPlainRef(static_cast<const uint16_t*>(w_row), x, n, Bf16ToFp32);
    case DType::kQ8_0:
      return DotBlocksRef(
          static_cast<const BlockQ8_0*>(w_row), x, nb,
          [](const BlockQ8_0& blk, int j) { return int{blk.qs[j]}; }, no_min);
    case DType::kQ4_0:
      return DotBlocksRef(
          static_cast<const BlockQ4_0*>(w_row), x, nb,
          [](const BlockQ4_0& blk, int j) { return Nibble(blk.qs, j); },
          [](const BlockQ4_0& blk) { return -8.0f * Fp16ToFp32Ref(blk.d); });
    case DType::kQ4_1:
      return DotBlocksRef(
          static_cast<const BlockQ4_1*>(w_row), x, nb,
          [](const BlockQ4_1& blk, int j) { return Nibble(blk.qs, j); },
          [](const BlockQ4_1& blk) { return Fp16ToFp32Ref(blk.m); });
  }
  return 0.0f;
}

}  // namespace

void DotRowsRef(float* out, const void* w, int64_t w_stride, int64_t rows, DType type,
                const float* x, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = DotRowRef(static_cast<const uint8_t*>(w) + r * w_stride, type, x, n);
  }
}

}  // namespace internal
}  // namespace glimpse::kernels
