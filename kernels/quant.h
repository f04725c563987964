// Weight storage formats and the kernels that read them.
//
// DType values are GGML's on-disk type ids, so a GGUF tensor's type field maps directly. Block
// formats (GGML's layouts, little-endian):
//   Q8_0: 32 elems = { fp16 d; int8 q[32] }                  x = d·q             (34 bytes)
//   Q4_0: 32 elems = { fp16 d; uint8 qs[16] }                x = d·(nib − 8)      (18 bytes)
//   Q4_1: 32 elems = { fp16 d; fp16 m; uint8 qs[16] }        x = d·nib + m        (20 bytes)
// where element j < 16 is the low nibble of qs[j] and element j ≥ 16 the high nibble of qs[j−16].
// F32, F16 (IEEE half) and BF16 are plain arrays. Row lengths of block formats must be multiples
// of 32. All functions are thread-compatible (no shared state) and never allocate.
#pragma once

#include <cstddef>
#include <cstdint>

namespace glimpse::kernels {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};

// True when `ggml_type` is one of the DType values above.
bool IsSupportedDType(uint32_t ggml_type);
const char* DTypeName(DType type);
// Elements per block (1 for plain types, 32 for block formats).
int64_t BlockElems(DType type);
// Bytes per block.
int64_t BlockBytes(DType type);
// Bytes of a row of `n` elements; `n` must be a multiple of BlockElems(type).
int64_t RowBytes(DType type, int64_t n);

float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
float Bf16ToFp32(uint16_t h);

// out[n] = in[n] decoded from `type`.
void DequantizeRow(float* out, const void* in, DType type, int64_t n);

// Activation quantisation for quantised dot products: Q8_0 blocks of `x[n]` (n % 32 == 0),
// rounding to nearest as GGML's quantize_row_q8_0 does. `out` holds RowBytes(kQ8_0, n) bytes.
void QuantizeRowQ8_0(void* out, const float* x, int64_t n);

// Dot product of one weight row (`type`, n elements) with an activation row. For block types
// the activation is the Q8_0 encoding of x (int8 × int8 products, GGML's vec_dot semantics); for
// plain types it is fp32 x[n]. Q4_1 follows GGML's vec_dot_q4_1_q8_1 (Σ d_w·d_x·Σnib·q + m_w·s_x)
// with s_x = d_x·Σq computed in fp32 from the Q8_0 block (GGML stores it rounded to fp16 in q8_1).
float DotRow(const void* w_row, DType type, const void* x, int64_t n);

// The activation encoding DotRow expects for weights of `type`: kQ8_0 or kF32.
DType ActivationType(DType weight_type);

}  // namespace glimpse::kernels
