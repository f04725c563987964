// The KV cache, ragged per (layer, kv-head): each head keeps its own list of entries, and every
// entry remembers the original position of its token. Eviction (core/eviction) may therefore keep
// a different subset of positions in every head; attention honours whatever is left.
//
// Keys are stored post-RoPE, so an entry's key never changes after it is written. Not thread-safe:
// one Session owns one cache; the forward pass writes distinct heads from distinct threads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace glimpse::model {

// Entries of one (layer, kv-head).
struct KvHead {
  std::vector<float> keys;         // [n, head_dim]
  std::vector<float> values;       // [n, head_dim]
  std::vector<int32_t> positions;  // [n] original token positions

  int64_t size() const { return static_cast<int64_t>(positions.size()); }
};

class KvCache {
 public:
  KvCache(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim);

  KvHead& head(int32_t layer, int32_t kv_head) { return heads_[Index(layer, kv_head)]; }
  const KvHead& head(int32_t layer, int32_t kv_head) const { return heads_[Index(layer, kv_head)]; }

  // Appends `n` entries to one head. k, v: [n, head_dim]; pos: [n].
  void Append(int32_t layer, int32_t kv_head, const float* k, const float* v, const int32_t* pos,
              int64_t n);

  // Keeps only the entries at `keep` (indices into the head's current entries, strictly
  // increasing). InvalidArgument (naming layer, head and index) when an index is out of range or
  // not increasing; the head is unchanged then.
  absl::Status Retain(int32_t layer, int32_t kv_head, const std::vector<int64_t>& keep);

  // Total entries over all heads, and bytes they occupy.
  int64_t TotalEntries() const;
  int64_t TotalBytes() const;
  void Clear();

  int32_t n_layers() const { return n_layers_; }
  int32_t n_kv_heads() const { return n_kv_heads_; }
  int32_t head_dim() const { return head_dim_; }

 private:
  size_t Index(int32_t layer, int32_t kv_head) const {
    return static_cast<size_t>(layer) * n_kv_heads_ + kv_head;
  }

  const int32_t n_layers_;
  const int32_t n_kv_heads_;
  const int32_t head_dim_;
  std::vector<KvHead> heads_;  // [n_layers · n_kv_heads]
};

}  // namespace glimpse::model
