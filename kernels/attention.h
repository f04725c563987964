// Attention over a ragged KV cache: each (layer, kv-head) keeps its own set of entries, each with
// the original position of its token, so eviction may drop any entries of any head.
//
// A query at position p attends to every entry whose position is <= p (causal by position, not by
// index: entries need not be contiguous or sorted). Keys are stored post-RoPE.
//
// Entries live in pages (core/model's KV pool): each page holds up to a fixed number of one head's
// entries in one element format, keys and values as rows. AttendPaged reads the pages as they are:
// for many query rows (prefill) it dequantises a tile of 16 rows at a time into a small buffer the
// tile's work then reuses, so the encoded bytes are read once per call; for a few (decode: at most
// 8) it dequantises each row in registers as it reads it.
#pragma once

#include <cstdint>
#include <span>

namespace glimpse::kernels {

// One kv-head and the `n_q` query rows that read it (the GQA group's heads × tokens).
//   out:   [n_q, head_dim]
//   q:     [n_q, head_dim]          (post-RoPE)
//   q_pos: [n_q]                     position of each query row
//   k, v:  [n_kv, head_dim]
//   kv_pos:[n_kv]
// out[i] = Σ_j softmax_j(q_i·k_j·scale | kv_pos[j] <= q_pos[i]) · v_j. A row with no visible entry
// gets zeros. `scratch` holds at least n_kv floats.
void AttendRagged(float* out, const float* q, const int32_t* q_pos, const float* k, const float* v,
                  const int32_t* kv_pos, float scale, float* scratch, int64_t n_q, int64_t n_kv,
                  int64_t head_dim);

// Element formats of KV pages. Row formats, those of core/kvpage's per-token codecs: fp32, fp16,
// bf16, int8, fp8_e4m3 (kI8 and kE4M3 rows carry a scale: x = code · scale[row]; E4M3 is OCP
// E4M3FN: bias 7, subnormals, 0x7F and 0xFF NaN). Group formats, core/kvpage's KIVI codecs
// (kKivi4, kKivi2): a page's keys and values are each one codec section of `rows` rows without
// residual, exactly as codec.h lays it out (fp16 scale and zero, keys per channel over groups of
// 32 rows, values per row over groups of 32 channels, then packed codes), x = code·scale + zero.
enum class KvDType : uint8_t { kF32, kF16, kBF16, kI8, kE4M3, kKivi4, kKivi2 };

// One page of one kv-head, as stored. Field by field:
struct KvPageView {
  KvDType dtype = KvDType::kF32;
  const void* k = nullptr;         // row formats: [rows, head_dim] elements of dtype, row-major;
                                   // KIVI: the keys section
  const void* v = nullptr;         // row formats: [rows, head_dim]; KIVI: the values section
  const float* k_scale = nullptr;  // [rows], kI8 and kE4M3 only
  const float* v_scale = nullptr;  // [rows], kI8 and kE4M3 only
  const int32_t* pos = nullptr;    // [rows] token positions
  int64_t rows = 0;
};

// Row `r` of a page in fp32: k[head_dim] its key, v[head_dim] its value. KIVI rows equal
// core/kvpage's decode of the same section, bit for bit.
void DequantizeKvPageRow(float* k, float* v, const KvPageView& page, int64_t r, int64_t head_dim);

// AttendRagged over the entries of `pages`, in order, as if their rows were dequantised and
// concatenated: the same values up to fp32 rounding; with one fp32 page it is AttendRagged. Pages
// of one call may differ in format (a KIVI head's full pages and its fp16 last page).
void AttendPaged(float* out, const float* q, const int32_t* q_pos,
                 std::span<const KvPageView> pages, float scale, int64_t n_q, int64_t head_dim);

}  // namespace glimpse::kernels
