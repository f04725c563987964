#include "core/eviction/eval/cache_contents.h"

#include <algorithm>

namespace glimpse::eviction::eval {

std::vector<model::KvHead> Snapshot(const model::KvCache& cache) {
  std::vector<model::KvHead> heads;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) heads.push_back(cache.head(l, h));
  }
  return heads;
}

void SetCache(model::Session& session, const std::vector<model::KvHead>& full,
              const KeptEntries* kept) {
  model::KvCache& cache = session.cache();
  const int64_t hd = cache.head_dim();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      const model::KvHead& src = full[static_cast<size_t>(l) * cache.n_kv_heads() + h];
      model::KvHead& dst = cache.head(l, h);
      if (kept == nullptr) {
        dst = src;
        continue;
      }
      const std::vector<int64_t>& keep = (*kept)[l][h];
      dst.keys.resize(keep.size() * hd);
      dst.values.resize(keep.size() * hd);
      dst.positions.resize(keep.size());
      for (size_t i = 0; i < keep.size(); ++i) {
        std::copy_n(&src.keys[keep[i] * hd], hd, &dst.keys[i * hd]);
        std::copy_n(&src.values[keep[i] * hd], hd, &dst.values[i * hd]);
        dst.positions[i] = src.positions[keep[i]];
      }
    }
  }
}

}  // namespace glimpse::eviction::eval
