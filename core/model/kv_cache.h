// The KV cache, ragged per (layer, kv-head): each head keeps its own list of entries, and every
// entry remembers the original position of its token. Eviction (core/eviction) may therefore keep
// a different subset of positions in every head; attention honours whatever is left.
//
// Storage: each head's entries live in pages of a KV pool (kv_pool.h), filled in order (every page
// but the last is full); the positions are kept per head. A cache made without a pool owns a
// private, unbounded one and stores fp32, exactly what the forward pass computed. Attention reads
// the pages as they are (Pages, kernels::AttendPaged).
//
// Row formats (fp32, fp16, bf16, int8, fp8_e4m3): rows are encoded as core/kvpage's codec of the
// same name encodes them, so a head read back (Read) equals the codec's round trip of what was
// appended.
//
// Group formats (kivi4, kivi2) hold a page that is still filling the way KIVI holds its residual:
// appended rows go to pages in fp16 (KvFillingFormat), and Seal() re-encodes every full fp16 page
// into one KIVI page (key groups of 32 rows from the page's first row) and frees it. So a head is
// sealed KIVI pages followed by fp16 pages, and reads back as KIVI's round trip of the fp16
// rounding of what was appended, for any chunking of the appends. The owner seals when the rows
// of a full page are final: after a prompt's eviction and after decode steps (core/worker's engine
// and core/eviction do), so eviction selects among rows rounded once. Retain that moves rows of
// sealed pages decodes and re-encodes them (one more rounding, within the codec's bound; sealing
// those pages again as they fill). Any scaled format with per-page scales would follow the same
// scheme. A pool whose page_tokens is not a multiple of 32 never seals.
//
// Keys are stored post-RoPE, so an entry's key never changes after it is written. Not thread-safe:
// one Sequence owns one cache; the forward pass writes distinct heads from distinct threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kvpage/codec.h"
#include "core/model/kv_pool.h"
#include "kernels/attention.h"

namespace glimpse::model {

// The page codec of a pool format. Row formats: the cache encodes its rows with it, so pages in it
// hold a cache's rows as they are (fp32, fp16 and bf16: the same bytes; int8 and fp8: the same
// codes, a row's scale recomputed from them, equal up to its last bit). Group formats: the codec
// whose sections sealed pages are.
kvpage::Codec RowCodec(kernels::KvDType dtype);

// Entries of one (layer, kv-head) as plain fp32: what scorers read and what moves between caches.
struct KvHead {
  std::vector<float> keys;         // [n, head_dim]
  std::vector<float> values;       // [n, head_dim]
  std::vector<int32_t> positions;  // [n] original token positions

  int64_t size() const { return static_cast<int64_t>(positions.size()); }
};

class KvCache {
 public:
  // Pages come from `pool` (not owned, must outlive the cache) in `dtype`; without a pool, from a
  // private unbounded pool in fp32 (`dtype` is then ignored).
  KvCache(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim, KvPool* pool = nullptr,
          kernels::KvDType dtype = kernels::KvDType::kF32);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Entries of one head.
  int64_t size(int32_t layer, int32_t kv_head) const;
  std::span<const int32_t> positions(int32_t layer, int32_t kv_head) const;
  // The head's entries decoded to fp32.
  KvHead Read(int32_t layer, int32_t kv_head) const;
  // The head's pages for attention (positions point into this cache; valid until it changes).
  std::vector<kernels::KvPageView> Pages(int32_t layer, int32_t kv_head) const;

  // Appends `n` entries to one head. k, v: [n, head_dim]; pos: [n]. All or nothing:
  // ResourceExhausted (naming the head, the pages needed and the pool's budget) when the pool
  // cannot hold them; InvalidArgument when a value does not fit the format (codec.h's ranges).
  absl::Status Append(int32_t layer, int32_t kv_head, const float* k, const float* v,
                      const int32_t* pos, int64_t n);
  // Replaces one head's entries with `entries` (encoded in the cache's format); the same errors as
  // Append, and the head is then empty.
  absl::Status Assign(int32_t layer, int32_t kv_head, const KvHead& entries);
  // Pages as core/kvpage stores them, without decoding or encoding anything.
  //
  // HeldSections: page `page` of a head as the keys and values sections of RowCodec(dtype())
  // without residual, gathered from the pool page (row formats: any page; group formats: a
  // sealed page). False for a group format's fp16 pages, whose rows a caller stores as residual.
  bool HeldSections(int32_t layer, int32_t kv_head, size_t page, std::vector<uint8_t>* keys,
                    std::vector<uint8_t>* values) const;
  // (HeldSections is false, too, for a page index past the head's pages.)
  // Whether AppendSections takes `n` entries in `codec` with `residual` fp16 rows now:
  // RowCodec(dtype()) without residual; for a group format only a whole page into a head whose
  // entries are all in sealed pages.
  bool TakesSections(int32_t layer, int32_t kv_head, kvpage::Codec codec, int64_t residual,
                     int64_t n) const;
  // Appends `n` entries given as their sections (what HeldSections or a stored page holds), byte
  // for byte; `pos` has n positions after the head's. FailedPrecondition unless TakesSections;
  // InvalidArgument when a size or position does not fit; ResourceExhausted when the pool is
  // full. The head is unchanged on error.
  absl::Status AppendSections(int32_t layer, int32_t kv_head, kvpage::Codec codec,
                              std::span<const uint8_t> keys, std::span<const uint8_t> values,
                              const int32_t* pos, int64_t n);
  // Group formats: re-encodes every full fp16 page of every head into the group format and frees
  // it (see above). Best effort: a page the pool has no room to re-encode stays fp16, and a later
  // Seal tries again. Nothing to do for row formats.
  void Seal();

  // Keeps only the entries at `keep` (indices into the head's current entries, strictly
  // increasing), moving rows as they are stored (no re-encoding, but for rows of sealed pages that
  // move) and returning emptied pages to the pool. InvalidArgument (naming layer, head and index)
  // when an index is out of range or not increasing; the head is unchanged then.
  // ResourceExhausted only when rows of sealed pages move and the pool cannot hold the fp16 page
  // they pass through; the head's entries are then unspecified (a prefix of what it should keep)
  // and the caller drops the sequence.
  absl::Status Retain(int32_t layer, int32_t kv_head, const std::vector<int64_t>& keep);
  // Keeps the first `n` entries of one head (n <= size). Cutting into a sealed page is a bug
  // (Sequence only truncates what its failed or temporary call appended, and seals between calls);
  // the process aborts with a message.
  void Truncate(int32_t layer, int32_t kv_head, int64_t n);

  // A copy of every head in new pages of the same pool and format; ResourceExhausted when the pool
  // cannot hold them. (Copies are explicit: a cache holds pool memory.)
  absl::StatusOr<KvCache> Clone() const;
  // Bytes of the pages the cache's entries would take in format `to` (sealed where it seals).
  int64_t BytesIn(kernels::KvDType to) const;
  // Re-encodes every entry into format `to`, head by head (a head's rows are decoded, its pages
  // freed, and the rows appended and sealed in `to`), so the pool needs room for one head's new
  // pages at a time, not a second copy. On error (ResourceExhausted: the pool could not hold a
  // head) the cache is left empty. FailedPrecondition for a cache without a pool.
  absl::Status Reencode(kernels::KvDType to);

  // Total entries over all heads, and bytes of the pages they hold.
  int64_t TotalEntries() const;
  int64_t TotalBytes() const;
  void Clear();

  int32_t n_layers() const { return n_layers_; }
  int32_t n_kv_heads() const { return n_kv_heads_; }
  int32_t head_dim() const { return head_dim_; }
  kernels::KvDType dtype() const { return dtype_; }
  // The format appended rows are written in (KvFillingFormat of dtype()).
  kernels::KvDType filling_dtype() const { return filling_; }
  KvPool& pool() const { return *pool_; }

 private:
  struct Head {
    std::vector<uint8_t*> pages;  // [0, sealed) in dtype_ (full), the rest in filling_
    std::vector<int32_t> positions;
    size_t sealed = 0;
  };
  size_t Index(int32_t layer, int32_t kv_head) const {
    return static_cast<size_t>(layer) * n_kv_heads_ + kv_head;
  }
  kernels::KvDType PageFormat(const Head& head, size_t page) const {
    return page < head.sealed ? dtype_ : filling_;
  }
  kernels::KvPageView View(const Head& head, size_t page) const;
  // Re-encodes the head's first unsealed page (full, fp16) into dtype_; false when the pool has
  // no room.
  bool SealPage(Head& head);
  void SealHead(Head& head);
  // Allocates the pages rows [have, have + n) of a head need (filling format); ResourceExhausted
  // naming the head when the pool cannot hold them (nothing allocated then).
  absl::Status GrowHead(Head& head, int32_t layer, int32_t kv_head, int64_t n);
  absl::Status CheckFollows(const Head& head, int32_t layer, int32_t kv_head, const int32_t* pos,
                            int64_t n) const;
  // Appends rows after re-encoding each full page (Retain's path for rows of sealed pages).
  absl::Status AppendSealing(int32_t layer, int32_t kv_head, const KvHead& rows);
  // Row addresses inside a page of the filling format.
  uint8_t* KeyRow(uint8_t* page, int64_t slot) const;
  uint8_t* ValueRow(uint8_t* page, int64_t slot) const;
  float* KeyScale(uint8_t* page) const;
  float* ValueScale(uint8_t* page) const;
  // Encodes rows [0, n) of k / v into consecutive slots of `page` from `slot`.
  absl::Status EncodeRows(uint8_t* page, int64_t slot, const float* k, const float* v,
                          int64_t n) const;
  void CopyRow(uint8_t* dst_page, int64_t dst_slot, const uint8_t* src_page,
               int64_t src_slot) const;
  void FreePagesFrom(Head& head, size_t first);

  int32_t n_layers_;
  int32_t n_kv_heads_;
  int32_t head_dim_;
  std::unique_ptr<KvPool> own_pool_;  // set when made without a pool
  KvPool* pool_;
  kernels::KvDType dtype_;
  kernels::KvDType filling_;  // KvFillingFormat(dtype_)
  bool seals_;                // a group format in pages of a multiple of 32 rows
  int64_t page_tokens_;
  std::vector<Head> heads_;  // [n_layers · n_kv_heads]
};

}  // namespace glimpse::model
