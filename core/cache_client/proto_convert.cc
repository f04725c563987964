#include "core/cache_client/proto_convert.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::cache_client {

absl::StatusOr<std::array<uint8_t, 16>> Key16FromBytes(const std::string& bytes,
                                                       std::string_view field) {
  if (bytes.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), " is ", bytes.size(), " bytes, expected 16"));
  }
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), bytes.data(), 16);
  return out;
}

std::string BytesOf(const std::array<uint8_t, 16>& key) {
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

void ManifestToProto(const kvstate::Manifest& m, v1::StateManifest* out) {
  out->set_state_key(BytesOf(m.state_key));
  out->set_namespace_key(BytesOf(m.namespace_key));
  out->mutable_model()->set_architecture(m.architecture);
  out->mutable_model()->set_digest(BytesOf(m.model));
  out->set_token_count(m.token_count);
  out->set_created_unix_micros(m.created_unix_micros);
  out->mutable_pages()->Reserve(static_cast<int>(m.pages.size()));
  for (const kvstate::PageRef& r : m.pages) {
    v1::CachePageRef* p = out->add_pages();
    p->set_layer(r.layer);
    p->set_kv_head(r.kv_head);
    p->set_index(r.index);
    p->set_first_position(r.first_position);
    p->set_last_position(r.last_position);
    p->set_n_tokens(r.n_tokens);
    p->set_importance(r.importance);
    p->set_tier(r.tier == kvstate::Tier::kRetained ? v1::PAGE_TIER_RETAINED
                                                   : v1::PAGE_TIER_EVICTED);
    p->set_bytes(r.bytes);
    p->set_crc32c(r.crc32c);
  }
}

absl::StatusOr<kvstate::Manifest> ManifestFromProto(const v1::StateManifest& p) {
  kvstate::Manifest m;
  ASSIGN_OR_RETURN(m.state_key, Key16FromBytes(p.state_key(), "manifest.state_key"));
  ASSIGN_OR_RETURN(m.namespace_key, Key16FromBytes(p.namespace_key(), "manifest.namespace_key"));
  ASSIGN_OR_RETURN(m.model, Key16FromBytes(p.model().digest(), "manifest.model.digest"));
  m.architecture = p.model().architecture();
  m.token_count = p.token_count();
  m.created_unix_micros = p.created_unix_micros();
  m.pages.reserve(p.pages_size());
  for (int i = 0; i < p.pages_size(); ++i) {
    const v1::CachePageRef& q = p.pages(i);
    kvstate::PageRef r;
    r.layer = q.layer();
    r.kv_head = q.kv_head();
    r.index = q.index();
    r.first_position = q.first_position();
    r.last_position = q.last_position();
    r.n_tokens = q.n_tokens();
    r.importance = q.importance();
    if (q.tier() == v1::PAGE_TIER_RETAINED) {
      r.tier = kvstate::Tier::kRetained;
    } else if (q.tier() == v1::PAGE_TIER_EVICTED) {
      r.tier = kvstate::Tier::kEvicted;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest page ", i, " has tier ", static_cast<int>(q.tier()),
                       "; expected PAGE_TIER_RETAINED or PAGE_TIER_EVICTED"));
    }
    r.bytes = q.bytes();
    r.crc32c = q.crc32c();
    m.pages.push_back(r);
  }
  return m;
}

}  // namespace glimpse::cache_client
