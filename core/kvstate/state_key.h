// State keys: content addresses of a session's KV state (DESIGN.md §3).
//
//   namespace key = SHA-256("glimpse-ns-v1" ‖ len ‖ tenant salt ‖ model fingerprint ‖ len ‖
//                           eviction policy)[0, 16)
//   state key     = SHA-256("glimpse-state-v1" ‖ namespace key ‖ tokens[0..n) as int32 LE)[0, 16)
//
// The namespace key folds in everything but the tokens, so the cache node never sees a tenant's
// salt: clients send the namespace key and the tokens, and the node can hash any prefix of them.
// PrefixHasher streams the tokens once and yields the key of every prefix it is asked for, so the
// keys of all stored prefix lengths of an n-token sequence cost O(n) hashing in total (not
// O(n²)). Thread-compatible; no allocation beyond the hasher's context.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/kvpage/page.h"

namespace glimpse::kvstate {

using kvpage::Fingerprint;
using kvpage::StateKey;
using NamespaceKey = std::array<uint8_t, 16>;

// What a cache node holds of a state: the state, or its tombstone (deleted there on request at
// deleted_unix_micros, cache-node/cache_node_service.h), or neither.
struct Held {
  bool stored = false;
  int64_t deleted_unix_micros = 0;  // 0: no tombstone
};

NamespaceKey MakeNamespaceKey(std::string_view tenant_salt, const Fingerprint& model,
                              std::string_view eviction_policy);

StateKey MakeStateKey(const NamespaceKey& ns, std::span<const int32_t> tokens);

// A model fingerprint from the 32 hex digits model::Model::fingerprint() prints; InvalidArgument
// naming the input otherwise.
absl::StatusOr<Fingerprint> FingerprintFromHex(std::string_view hex);

// Streams tokens; Key() is the state key of everything appended so far.
class PrefixHasher {
 public:
  explicit PrefixHasher(const NamespaceKey& ns);
  ~PrefixHasher();
  PrefixHasher(const PrefixHasher&) = delete;
  PrefixHasher& operator=(const PrefixHasher&) = delete;

  void Append(std::span<const int32_t> tokens);
  StateKey Key() const;  // does not disturb the stream
  size_t tokens() const { return tokens_; }

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  size_t tokens_ = 0;
};

}  // namespace glimpse::kvstate
