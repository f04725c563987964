// Internal to kernels/cpu: GGML block structs, the scalar reference kernels every fast path is
// tested against, the AVX2 fast paths (compiled only where __AVX2__, __FMA__ and __F16C__ are
// defined) and the AVX-512 ones for block formats (compiled where the build can, CMake's
// GLIMPSE_BUILD_AVX512; run where the CPU has AVX-512: UseAvx512). Public entry points in
// kernels/quant.h dispatch between them.
#pragma once

#include <cstdint>

#include "kernels/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GLIMPSE_KERNELS_AVX2 1
#if defined(GLIMPSE_BUILD_AVX512)
#define GLIMPSE_KERNELS_AVX512 1
#endif
#endif

// The block decoders below are shared with kernels/cuda, which compiles them for the device too.
#if defined(__CUDACC__)
#define GLIMPSE_HOST_DEVICE __host__ __device__
#else
#define GLIMPSE_HOST_DEVICE
#endif

namespace glimpse::kernels::internal {

// GGML's block layouts (ggml-common.h), packed to their on-disk sizes.
struct BlockQ8_0 {
  uint16_t d;     // fp16 scale
  int8_t qs[32];  // x = d·q
};
struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // x = d·(nib − 8); elem j < 16: low nibble of qs[j], j ≥ 16: high of qs[j−16]
};
struct BlockQ4_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum
  uint8_t qs[16];  // x = d·nib + m; nibble order as BlockQ4_0
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);

constexpr int64_t QK = 32;     // elements per block of the 32-element block formats
constexpr int64_t QK_K = 256;  // elements per K-quant super-block

struct BlockQ4_K {
  uint16_t d;          // fp16 super-block scale of the sub-block scales
  uint16_t dmin;       // fp16 super-block scale of the sub-block minimums
  uint8_t scales[12];  // 8 sub-blocks' 6-bit scales and minimums, packed (GetScaleMinK4)
  uint8_t qs[128];     // 4-bit quants: 64-element groups, low nibbles then high nibbles
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // as BlockQ4_K
  uint8_t qh[32];      // the quants' fifth bits: bit 2g of qh[l] for group g's low half, 2g+1 high
  uint8_t qs[128];     // low 4 bits, as BlockQ4_K
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // 8-bit sub-block scales, one per 16 elements
  uint16_t d;         // fp16 super-block scale
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

GLIMPSE_HOST_DEVICE inline bool IsKQuant(DType type) {
  return type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
}

// Sub-block j's 6-bit scale and minimum of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4).
GLIMPSE_HOST_DEVICE inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Scalar references (bit-exact IEEE conversions, GGML's reference loops).
float Fp16ToFp32Ref(uint16_t h);
uint16_t Fp32ToFp16Ref(float f);  // round to nearest even; NaN stays NaN (quiet)
void DequantizeRowRef(float* out, const void* in, DType type, int64_t n);
// Per row: plain types Σ w·x in index order; block types per block as quant.h describes.
void DotRowsRef(float* out, const void* w, int64_t w_stride, int64_t rows, DType type,
                const float* x, int64_t n);

#ifdef GLIMPSE_KERNELS_AVX2
void DequantizeRowAvx2(float* out, const void* in, DType type, int64_t n);
void DotRowsAvx2(float* out, const void* w, int64_t w_stride, int64_t rows, DType type,
                 const float* x, int64_t n);
void DotRowsTokensAvx2(float* out, int64_t out_stride, const void* w, int64_t w_stride,
                       int64_t rows, DType type, const float* x, int64_t m, int64_t n);
#endif

#ifdef GLIMPSE_KERNELS_AVX512
// Whether this CPU runs the AVX-512 paths (F, BW, VL) and the environment does not ask for AVX2
// (GLIMPSE_KERNELS=avx2, to compare the two); decided once.
bool UseAvx512();
// As the AVX2 entry points; plain types go to them.
void DotRowsAvx512(float* out, const void* w, int64_t w_stride, int64_t rows, DType type,
                   const float* x, int64_t n);
void DotRowsTokensAvx512(float* out, int64_t out_stride, const void* w, int64_t w_stride,
                         int64_t rows, DType type, const float* x, int64_t m, int64_t n);
#endif

}  // namespace glimpse::kernels::internal
