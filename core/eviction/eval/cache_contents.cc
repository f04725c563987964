#include "core/eviction/eval/cache_contents.h"

#include "core/common/status_macros.h"
#include "core/eviction/recall.h"

namespace glimpse::eviction::eval {

std::vector<model::KvHead> Snapshot(const model::KvCache& cache) {
  std::vector<model::KvHead> heads;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) heads.push_back(cache.Read(l, h));
  }
  return heads;
}

absl::Status SetCache(model::Sequence& session, const std::vector<model::KvHead>& full,
                      const KeptEntries* kept) {
  model::KvCache& cache = session.cache();
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      const model::KvHead& src = full[static_cast<size_t>(l) * cache.n_kv_heads() + h];
      RETURN_IF_ERROR(cache.Assign(l, h, kept == nullptr ? src : Rows(src, (*kept)[l][h])));
    }
  }
  return absl::OkStatus();
}

}  // namespace glimpse::eviction::eval
