#include "core/model/kv_cache.h"

#include "absl/strings/str_format.h"

namespace glimpse::model {

KvCache::KvCache(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      heads_(static_cast<size_t>(n_layers) * n_kv_heads) {}

void KvCache::Append(int32_t layer, int32_t kv_head, const float* k, const float* v,
                     const int32_t* pos, int64_t n) {
  KvHead& h = head(layer, kv_head);
  h.keys.insert(h.keys.end(), k, k + n * head_dim_);
  h.values.insert(h.values.end(), v, v + n * head_dim_);
  h.positions.insert(h.positions.end(), pos, pos + n);
}

absl::Status KvCache::Retain(int32_t layer, int32_t kv_head, const std::vector<int64_t>& keep) {
  if (layer < 0 || layer >= n_layers_ || kv_head < 0 || kv_head >= n_kv_heads_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no KV head (layer %d, kv_head %d): cache has %d layers × %d kv heads",
                        layer, kv_head, n_layers_, n_kv_heads_));
  }
  KvHead& h = head(layer, kv_head);
  for (size_t i = 0; i < keep.size(); ++i) {
    const bool in_range = keep[i] >= 0 && keep[i] < h.size();
    const bool increasing = i == 0 || keep[i] > keep[i - 1];
    if (!in_range || !increasing) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Retain(layer %d, kv_head %d): index %d at slot %d is %s (head has %d entries)", layer,
          kv_head, keep[i], i, in_range ? "not increasing" : "out of range", h.size()));
    }
  }
  // Compacting in place is safe because keep is strictly increasing: dst <= src always.
  const int64_t d = head_dim_;
  for (size_t dst = 0; dst < keep.size(); ++dst) {
    const int64_t src = keep[dst];
    std::copy_n(h.keys.begin() + src * d, d, h.keys.begin() + dst * d);
    std::copy_n(h.values.begin() + src * d, d, h.values.begin() + dst * d);
    h.positions[dst] = h.positions[src];
  }
  h.keys.resize(keep.size() * d);
  h.values.resize(keep.size() * d);
  h.positions.resize(keep.size());
  return absl::OkStatus();
}

int64_t KvCache::TotalEntries() const {
  int64_t total = 0;
  for (const KvHead& h : heads_) total += h.size();
  return total;
}

int64_t KvCache::TotalBytes() const {
  int64_t total = 0;
  for (const KvHead& h : heads_) {
    total += static_cast<int64_t>((h.keys.size() + h.values.size()) * sizeof(float) +
                                  h.positions.size() * sizeof(int32_t));
  }
  return total;
}

void KvCache::Clear() {
  for (KvHead& h : heads_) {
    h.keys.clear();
    h.values.clear();
    h.positions.clear();
  }
}

}  // namespace glimpse::model
