// Parking (engine.h) on a cache node: a preempted sequence's KV is stored as a state of its own and
// its pool pages freed; unparking fetches that state back into the session and deletes it.
//
// The state's namespace is drawn at random per CacheParking, so nothing else looks it up and no
// state of the same tokens from another history can stand in for it. Its pages are in
// model::RowCodec of the session's pool format, so the session comes back with the rows it had
// (exactly for fp32, fp16, bf16 and KIVI, whose pages are stored and loaded as the pool holds
// them; int8 and fp8 codes exactly, their scales up to the last bit) and its tokens are those of
// an uninterrupted run.
// A stored copy left behind (a turn that ends parked) is deleted when the CacheParking goes. Used
// from the engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/cache_client/cache_client.h"
#include "core/model/model.h"
#include "core/model/sequence.h"
#include "core/worker/engine.h"

namespace glimpse::worker {

class CacheParking {
 public:
  // `prompt`: the tokens `session` holds now (its turn's whole conversation so far).
  CacheParking(cache_client::CacheClient& cache, const model::Model& model,
               model::Sequence& session, std::span<const int32_t> prompt, std::string session_id,
               int64_t page_tokens);
  ~CacheParking();
  CacheParking(const CacheParking&) = delete;
  CacheParking& operator=(const CacheParking&) = delete;

  // Hooks bound to this object, which must outlive the engine's use of them.
  Parking Hooks();

 private:
  absl::Status Park(std::span<const int32_t> generated);
  absl::Status Unpark();

  cache_client::CacheClient& cache_;
  const model::Model& model_;
  model::Sequence& session_;
  const std::vector<int32_t> prompt_;
  const std::string session_id_;
  const int64_t page_tokens_;
  const kvstate::NamespaceKey namespace_key_;
  std::optional<kvstate::StateKey> stored_;  // the parked state, while it is on the node
  int32_t position_ = 0;                     // the session's next position when parked
};

}  // namespace glimpse::worker
