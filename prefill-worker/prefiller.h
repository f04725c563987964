// One prefill job on a prefill worker (DESIGN.md §1, the prefill side):
//
//   1. Start state: the longest prefix of the conversation's first n − 1 tokens (of its first
//      hot_tokens when the job names the decode worker's hot copy) stored on the cache node, its
//      retained pages loaded (warm); else nothing (recompute). A cache node that fails is logged
//      and counts as a miss.
//   2. Prefill tokens [reused, n − 1) under the session's eviction policy (every entry, history
//      and new, scored; the budget kept per layer and kv-head). The last token is the decode
//      worker's: it prefills it for the logits it samples from.
//   3. Store the state of the n − 1 tokens on the cache node — retained pages and the evicted
//      ones (the cold tier), so nothing evicted is lost — and wait for the acknowledgement. A
//      store that fails is logged; the delivery still goes (the decode worker stores its state
//      at turn end).
//   4. Ship the retained pages to the decode worker as one delivery (prefill_delivery.h) and wait
//      until its transport has them. When the job names the decode worker's hot copy
//      (hot_tokens) and step 1 loaded exactly that state, ship only a delta against it
//      (prefill_delta.h): the entries it lacks and the positions it drops.
// Errors before the prefill (fewer than 2 tokens, ids outside the vocabulary, no room in the
// context, an unknown or unusable scorer, no decode address or delivery id) are InvalidArgument /
// FailedPrecondition; a delivery that cannot be shipped is the transport's error, prefixed with
// what was being shipped where.
//
// Run is thread-safe, and concurrent jobs are scheduled: their prefills take turns at the model
// one chunk (prefill_chunk_tokens) at a time in arrival order (worker::ComputeTurns), so a short
// prompt waits for at most one chunk of a long one; loading, encoding, storing and shipping run
// outside the turn, beside the others' compute. Each job's KV lives in the worker's pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cache_client/cache_client.h"
#include "core/model/model.h"
#include "core/transport/transport.h"
#include "core/worker/compute_turns.h"
#include "core/worker/policy.h"
#include "core/worker/prefill_delivery.h"
#include "core/worker/session_state.h"

namespace glimpse::prefill_worker {

struct PrefillJob {
  std::string session_id;
  kvstate::NamespaceKey namespace_key{};
  std::vector<int32_t> tokens;
  worker::Policy policy;
  std::string decode_address;  // the decode worker's transport address
  uint64_t delivery_id = 0;
  // Tokens the decode worker's hot copy of the session summarises (0: none), the base a delta
  // is shipped against.
  int32_t hot_tokens = 0;
};

struct PrefillOutcome {
  bool warm = false;  // started from a stored prefix
  int32_t reused_tokens = 0;
  int32_t prefilled_tokens = 0;
  int32_t delivered_tokens = 0;
  int64_t kept_entries = 0;
  int64_t total_entries = 0;
  double load_seconds = 0.0;
  double prefill_seconds = 0.0;
  double ship_seconds = 0.0;
  uint64_t shipped_bytes = 0;
  uint64_t stored_bytes = 0;  // 0: not stored
  int64_t recall_candidates = 0;
  int64_t recalled_entries = 0;
  bool delta = false;  // shipped as a delta against the decode worker's hot copy
};

struct PrefillerOptions {
  int64_t page_tokens = 64;
  worker::PrefillLimits limits;
  std::string lookahead_module;
  eviction::EvictionProfile profile;  // each method's settings
  model::KvPool* kv_pool = nullptr;   // where a job's KV lives; nullptr: a private fp32 pool
  absl::Duration ship_timeout = absl::Seconds(30);
  int32_t prefill_chunk_tokens = 256;  // tokens per turn at the model
};

class Prefiller {
 public:
  // `cache` may be null (nothing loaded or stored); `ship` carries deliveries and is not shared
  // with a receiver.
  Prefiller(const model::Model& model, kernels::ThreadPool& pool, cache_client::CacheClient* cache,
            transport::Transport& ship, PrefillerOptions options);

  absl::StatusOr<PrefillOutcome> Run(const PrefillJob& job);
  // Jobs prefilling and waiting for their turn now; turns handed over at chunk boundaries.
  worker::ComputeTurns::Stats TurnStats() const { return turns_.stats(); }

 private:
  absl::Status Check(const PrefillJob& job) const;
  // The delivery: the state's retained pages, or (with `base`, the hot copy's positions per
  // head) the delta against it.
  absl::StatusOr<worker::OutgoingDelivery> MakeDelivery(
      const PrefillJob& job, const kvstate::EncodedState& state, const model::KvCache& cache,
      const std::vector<std::vector<int32_t>>* base) const;
  absl::Status Ship(const PrefillJob& job, const worker::OutgoingDelivery& delivery,
                    PrefillOutcome* out);

  const model::Model& model_;
  kernels::ThreadPool& pool_;
  cache_client::CacheClient* const cache_;
  transport::Transport& ship_;
  const PrefillerOptions options_;
  worker::ScorerCache scorers_;
  transport::PeerMap peers_;
  worker::ComputeTurns turns_;
};

}  // namespace glimpse::prefill_worker
