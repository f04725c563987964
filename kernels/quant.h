// Weight storage formats and the kernels that read them.
//
// DType values are GGML's on-disk type ids, so a GGUF tensor's type field maps directly. Block
// formats (GGML's layouts, little-endian):
//   Q8_0: 32 elems = { fp16 d; int8 q[32] }                  x = d·q             (34 bytes)
//   Q4_0: 32 elems = { fp16 d; uint8 qs[16] }                x = d·(nib − 8)      (18 bytes)
//   Q4_1: 32 elems = { fp16 d; fp16 m; uint8 qs[16] }        x = d·nib + m        (20 bytes)
// where element j < 16 is the low nibble of qs[j] and element j ≥ 16 the high nibble of qs[j−16].
// K-quants (llama.cpp's "k" formats, super-blocks of 256 elements in 8 or 16 sub-blocks, each with
// its own 6- or 8-bit scale; the layouts and decoding of ggml-quants.c's dequantize_row_q*_K):
//   Q4_K: { fp16 d, dmin; uint8 scales[12]; uint8 qs[128] }     x = d·sc·q − dmin·m    (144 bytes)
//   Q5_K: { fp16 d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128] }              (176 bytes)
//   Q6_K: { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; fp16 d }   x = d·sc·(q − 32)  (210 bytes)
// F32, F16 (IEEE half) and BF16 are plain arrays. Row lengths of block formats must be multiples
// of BlockElems (32; 256 for K-quants). All functions are thread-compatible (no shared state) and
// never allocate.
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
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// True when `ggml_type` is one of the DType values above.
bool IsSupportedDType(uint32_t ggml_type);
const char* DTypeName(DType type);
// Elements per block (1 for plain types, 32 for block formats, 256 for K-quants).
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

// Decode's dot products: stored weights × fp32 activations. Each weight element is decoded inside
// registers (never written out as an fp32 row) and multiplied with fp32 x in fp32, so the result
// equals Σ_i DequantizeRow(w)[i]·x[i] up to fp32 summation order, the same arithmetic as prefill's
// sgemm over dequantised panels and as an fp32 reference model. The activation is deliberately not
// quantised (GGML's vec_dot rounds x to Q8_0, which moves logits by ~0.3 and flips greedy tokens
// against the fp32 oracle); decode still reads only the quantised weight bytes. Block formats sum
// per block and scale once: Q8_0 Σ_b d·Σ q·x, Q4_0 and Q4_1 Σ_b d·Σ nib·x + m·Σ x (Q4_0: m = −8·d).
// K-quants decode each weight as DequantizeRow does and sum w·x (the reference in index order, AVX2
// 8 lanes at a time; no multi-token sharing or AVX-512 path yet).

// Σ_i w[i]·x[i] for one weight row of `type` (n elements) and fp32 x[n].
float DotRow(const void* w_row, DType type, const float* x, int64_t n);

// out[r] = DotRow(w + r·w_stride bytes, type, x, n) for r < rows. Several rows per pass share each
// load of x (the form MatMul uses); `w_stride` is in bytes.
void DotRows(float* out, const void* w, int64_t w_stride, int64_t rows, DType type, const float* x,
             int64_t n);

// The multi-token form (a decode step over several sequences, a short prefill):
// out[t·out_stride + r] = DotRows's out[r] for token t's activation x + t·n, for t < m. Block
// formats decode each weight block once for up to four tokens; every result equals DotRows's for
// that token bit for bit, so a sequence's decode does not depend on the others in its step.
void DotRowsTokens(float* out, int64_t out_stride, const void* w, int64_t w_stride, int64_t rows,
                   DType type, const float* x, int64_t m, int64_t n);

}  // namespace glimpse::kernels
