// Codecs that store one [n, head_dim] tensor of a page (its keys or its values), and the registry
// that names them. A codec is a row of plain function pointers found by its one-byte id
// (FindCodec) or its name (FindCodecByName); there is no string dispatch anywhere else.
//
// Contract shared by every codec:
//  * SectionBytes(role, n, hd, residual) is exact and depends only on its arguments; Encode writes
//    exactly that many bytes and Decode reads exactly that many. Decode cannot fail: the page
//    layer has already checked every size, so any bytes decode to some floats (corrupt scales may
//    give NaN or inf, never an out-of-bounds access).
//  * Encode rejects inputs it cannot represent (NaN, inf, or beyond the format's range: fp16
//    and the KIVI codecs |x| ≤ 65504, bf16 |x| ≤ 3.3895e38) with InvalidArgument naming the row,
//    column and value; nothing useful is left in `out` then.
//  * `residual` (the last `residual` rows kept fp16) is accepted only where supports_residual;
//    other codecs require 0.
//  * Thread-compatible: no state; functions never allocate.
//
// Section layouts, little-endian, no padding (hd = head_dim, q = n − residual, b = bits):
//   fp32      f[n·hd] IEEE single                             exact (NaN and inf rejected)
//   fp16      h[n·hd] IEEE half, round to nearest even        |x − x̂| ≤ |x|·2^−11 + 2^−25
//   bf16      h[n·hd] upper half of fp32, nearest even        |x − x̂| ≤ |x|·2^−8
//   fp8_e4m3  f32 scale[n]; u8 code[n·hd]                     x̂ = e4m3(code)·scale[row]
//             OCP E4M3FN (bias 7, no inf, 0x7F/0xFF NaN, max 448); per-token scale = absmax/448,
//             saturating, round to nearest even. |x − x̂| ≤ |x|·2^−4 + scale·2^−10 (subnormals)
//   int8      f32 scale[n]; i8 code[n·hd]                     x̂ = code·scale[row]
//             symmetric per token: scale = absmax/127, code = round(x/scale) ∈ [−127, 127].
//             |x − x̂| ≤ scale/2
//   kivi4/2   KIVI (jy-yuan/KIVI quant/new_pack.py): asymmetric, x̂ = code·scale + zero with
//             zero ≈ min and scale ≈ (max − min)/(2^b − 1), code ∈ [0, 2^b − 1]; groups of G = 32.
//             keys:   h scale[gt, hd]; h zero[gt, hd]      per channel over token groups
//                     (gt = ⌈q/32⌉; group g holds rows 32g .. min(32g+32, q))
//             values: h scale[q, gc]; h zero[q, gc]        per token over channel groups
//                     (gc = ⌈hd/32⌉; group g holds channels 32g .. min(32g+32, hd))
//             then u8 code[q, ⌈hd·b/8⌉] (row-major; channel c of a row in bits (c·b mod 8) of
//             byte c·b/8, low bits first), then h residual[residual, hd] (fp16 rows, see
//             page.h for which rows). zero is min rounded down to fp16 and scale is
//             (max − zero)/(2^b − 1) rounded up to fp16, so every x lies inside
//             [zero, zero + (2^b − 1)·scale] and |x − x̂| ≤ scale/2 (+ fp32 rounding).
// The error bounds are checked by codec_test.cc (with a relative slack of 2^−20 for fp32
// arithmetic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"

namespace glimpse::kvpage {

// Stored in the page header; never renumber.
enum class Codec : uint8_t {
  kFp16 = 1,
  kBf16 = 2,
  kFp8E4M3 = 3,
  kInt8 = 4,
  kKivi4 = 5,
  kKivi2 = 6,
  kFp32 = 7,  // exact: for tests that must equal the dense fp32 path
};

// Which tensor of the page a section holds (KIVI quantises them along different axes).
enum class Role : uint8_t { kKeys = 0, kValues = 1 };

inline constexpr int64_t kKiviGroup = 32;     // G: tokens per key group, channels per value group
inline constexpr int64_t kKiviResidual = 32;  // R: trailing tokens of a sequence kept fp16
inline constexpr int64_t kMaxHeadDim = 1024;  // codecs keep per-channel scratch on the stack

struct CodecInfo {
  Codec id;
  const char* name;        // "fp16", "bf16", "fp8_e4m3", "int8", "kivi4", "kivi2", "fp32"
  bool supports_residual;  // accepts residual > 0 (the KIVI codecs)
  size_t (*section_bytes)(Role role, int64_t n, int64_t hd, int64_t residual);
  // x: [n, hd] fp32 → out[section_bytes(...)].
  absl::Status (*encode)(Role role, const float* x, int64_t n, int64_t hd, int64_t residual,
                         uint8_t* out);
  // in[section_bytes(...)] → x: [n, hd] fp32.
  void (*decode)(Role role, const uint8_t* in, int64_t n, int64_t hd, int64_t residual, float* x);
};

// The registry, in id order.
std::span<const CodecInfo> AllCodecs();
// nullptr when `id` names no codec.
const CodecInfo* FindCodec(uint8_t id);
const CodecInfo* FindCodecByName(std::string_view name);
const char* CodecName(Codec codec);  // "unknown" for values outside the enum

}  // namespace glimpse::kvpage
