// Internal to core/kvpage: the per-codec entry points the registry (codec.cc) lists, and helpers
// they share. Shapes follow codec.h: x is [n, hd] fp32, sections are byte arrays.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "core/kvpage/codec.h"

namespace glimpse::kvpage::internal {

inline constexpr float kFloatMax = 3.40282347e38f;
// Per-token scales (fp8, int8): rows whose absmax is below 2^−100 are stored as zeros with scale 0,
// so that 1/scale stays finite.
inline constexpr float kTinyAbsMax = 7.88860905e-31f;

// fp16 rows: x[count] ↔ h[count]. Encode rejects NaN, inf and |x| > 65504 with InvalidArgument
// naming `codec`, the row (first_row + i / hd), the column and the value.
absl::Status EncodeHalfRows(const char* codec, const float* x, int64_t count, int64_t hd,
                            int64_t first_row, uint8_t* out);
void DecodeHalfRows(const uint8_t* in, int64_t count, float* x);

// InvalidArgument for the first element of x[count] that is NaN, inf or |x| > limit (OK if none).
absl::Status FirstOutOfRange(const char* codec, const float* x, int64_t count, int64_t hd,
                             int64_t first_row, float limit);

// Codec entry points (see codec.h for the layouts).
size_t Fp32Bytes(Role role, int64_t n, int64_t hd, int64_t residual);
absl::Status Fp32Encode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                        uint8_t* out);
void Fp32Decode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);

size_t Fp16Bytes(Role role, int64_t n, int64_t hd, int64_t residual);
absl::Status Fp16Encode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                        uint8_t* out);
void Fp16Decode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);

size_t Bf16Bytes(Role role, int64_t n, int64_t hd, int64_t residual);
absl::Status Bf16Encode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                        uint8_t* out);
void Bf16Decode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);

size_t Fp8Bytes(Role role, int64_t n, int64_t hd, int64_t residual);
absl::Status Fp8Encode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                       uint8_t* out);
void Fp8Decode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);

size_t Int8Bytes(Role role, int64_t n, int64_t hd, int64_t residual);
absl::Status Int8Encode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                        uint8_t* out);
void Int8Decode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);

template <int BITS>
size_t KiviBytes(Role role, int64_t n, int64_t hd, int64_t residual);
template <int BITS>
absl::Status KiviEncode(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                        uint8_t* out);
template <int BITS>
void KiviDecode(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);

// Per-row absmax of x[hd] as fp32 bits (NaN/inf give bits ≥ 0x7F800000), shared by fp8 and int8.
uint32_t AbsMaxBits(const float* x, int64_t hd);

}  // namespace glimpse::kvpage::internal
