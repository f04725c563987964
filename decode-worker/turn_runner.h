// One turn of a session on a decode worker (DESIGN.md §1, the decode side):
//
//   1. Start state: a prefill worker's delivery when the request names one (the prefill worker
//      prefilled and evicted all but the last token); else the worker's hot copy when its tokens
//      are a proper prefix of the request's (hot); else the longest stored prefix on the cache
//      node, its retained pages loaded into a fresh session (warm); else an empty session
//      (recompute). A delivery that does not come or does not fit, or a cache node that cannot be
//      reached, is logged and treated as a miss: the turn falls back instead of failing.
//   2. Prefill the remaining tokens with the policy: no eviction ("none", or after a delivery,
//      whose eviction the prefill worker ran), or prefill with eviction (core/worker/
//      session_state.h): every entry, history and new, scored, the budget
//      max(ceil(ratio × tokens), sinks + window) kept per (layer, kv-head).
//   3. Decode, streaming tokens (a callback returning false, e.g. a cancelled client, stops it).
//      When the KV pool is full even after idle hot copies went, the engine may preempt the
//      decode: its KV waits on the cache node (worker::CacheParking) and comes back when there is
//      room, the stream paused meanwhile, the tokens unchanged.
//   4. Write the new state — the hot cache as retained pages and this turn's evicted entries as
//      evicted pages, importance from the scores — to the cache node under the state key of the
//      tokens it summarises, and wait for the node's acknowledgement (so a turn reported done is
//      durable; a state already stored under that key, made from another history, stands); then
//      keep the session hot.
// Errors found before the turn starts (token ids outside the vocabulary, a conversation that fills
// the context, bad sampling, an unusable scorer, a turn of the session still running after
// session_wait) are InvalidArgument / FailedPrecondition with the session untouched; a failure once
// the prefill ran drops the hot copy (what the cache node stored is intact, so the next turn goes
// warm). Run may be called from many threads at once: the turns' model work goes through one
// worker::Engine, so their decodes share steps (continuous batching) while loading, storing and
// streaming run on the callers' threads. Turns of one session run one after the other (a turn
// waits up to session_wait for the previous one).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache_client/cache_client.h"
#include "core/eviction/scorer.h"
#include "core/kvpage/codec.h"
#include "core/model/generator.h"
#include "core/model/model.h"
#include "core/model/sampler.h"
#include "core/worker/engine.h"
#include "core/worker/policy.h"
#include "core/worker/prefill_delivery.h"
#include "core/worker/session_state.h"
#include "decode-worker/hot_sessions.h"

namespace glimpse::decode_worker {

using worker::ParsePolicy;
using worker::Policy;

enum class Source { kHot, kWarm, kRecompute, kPrefillWorker };
std::string_view SourceName(Source s);

struct TurnRequest {
  // When the request arrived (TTFT counts from here, so a turn that waited for the engine
  // includes the wait).
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
  std::string session_id;
  kvstate::NamespaceKey namespace_key{};
  std::vector<int32_t> tokens;
  model::SamplingOptions sampling;
  int32_t max_tokens = 0;
  std::vector<std::string> stop;  // stop strings (core/model/stop_strings.h)
  Policy policy;
  // Nonzero: a prefill worker's delivery (core/worker/prefill_delivery.h) to start from.
  uint64_t delivery_id = 0;
};

struct TurnStart {
  Source source = Source::kRecompute;
  int32_t reused_tokens = 0;
  int32_t prefilled_tokens = 0;
  int64_t kept_entries = 0;
  int64_t total_entries = 0;
  double load_seconds = 0.0;  // stored pages fetched and decoded, cold pages for recall included
  double prefill_seconds = 0.0;
  double ttft_seconds = 0.0;  // set when the first token is streamed
  int64_t recall_candidates = 0;
  int64_t recalled_entries = 0;
};

struct TurnResult {
  TurnStart start;
  model::StopReason stop = model::StopReason::kMaxTokens;  // a stop string: kEndOfGeneration
  int32_t generated_tokens = 0;
  int64_t kv_tokens = 0;
  int64_t kv_entries = 0;
  int64_t hot_tokens = 0;
  uint64_t state_bytes = 0;     // encoded pages stored, both tiers
  uint64_t retained_bytes = 0;  // of which the retained (hot) pages
  uint64_t full_fp16_bytes = 0;
  std::optional<kvstate::StateKey> state_key;  // unset when no cache node took the state
  double decode_tokens_per_second = 0.0;
  int64_t decode_evicted_entries = 0;  // taken out by decode-time eviction (all heads)
};

struct TurnCallbacks {
  std::function<void(const TurnStart&)> started;
  // Newly generated ids and the text they complete (up to a stop string; text a stop string
  // may start with waits); false stops decoding.
  std::function<bool(std::span<const int32_t>, const std::string&)> tokens;
};

struct TurnRunnerOptions {
  int64_t page_tokens = 64;
  int32_t max_output_tokens = 4096;
  int32_t prefill_chunk_tokens = 256;  // running decodes step between a prompt's chunks
  worker::PrefillLimits limits;        // recall
  std::string lookahead_module;        // the LookaheadKV module for method "lookahead"
  eviction::EvictionProfile profile;   // each method's settings
  // Where sessions' KV lives (the worker's kv_memory); nullptr: a private fp32 pool per session.
  model::KvPool* kv_pool = nullptr;
  absl::Duration delivery_timeout = absl::Seconds(10);  // wait for a prefill worker's delivery
  // How long a turn waits for the session's previous turn (cancelled by its client, still
  // storing) to end before it fails with FailedPrecondition.
  absl::Duration session_wait = absl::Seconds(30);
};

class TurnRunner {
 public:
  // `cache` may be null (no cache node: states are not stored, nothing is warm); `inbox` may be
  // null (no prefill workers: a request naming a delivery starts as without one).
  TurnRunner(const model::Model& model, kernels::ThreadPool& pool, cache_client::CacheClient* cache,
             worker::DeliveryInbox* inbox, HotSessions& hot, TurnRunnerOptions options);

  absl::StatusOr<TurnResult> Run(const TurnRequest& request, const TurnCallbacks& callbacks);

  worker::EngineStats EngineStats() const { return engine_.Stats(); }

 private:
  // `cold` (may be null): where a warm start leaves its state's evicted entries, fetched with it.
  HotSession StartState(const TurnRequest& r, std::optional<HotSession> hot, TurnStart* start,
                        std::vector<model::KvHead>* cold);
  std::optional<HotSession> LoadWarm(const TurnRequest& r, TurnStart* start,
                                     std::vector<model::KvHead>* cold);
  // A delta delivery applies to `hot` (which it then empties into the result); a whole one
  // seeds a fresh session.
  std::optional<HotSession> LoadDelivery(const TurnRequest& r, std::optional<HotSession>& hot,
                                         TurnStart* start);
  // A new session's options for request `r`: the worker's pool, the policy codec's hot format.
  model::SessionOptions SessionOptions(const TurnRequest& r) const;
  // Whether this turn recalls: a cache node and worker::Recalls.
  bool Recalls(const eviction::Scorer* scorer) const;
  // The session's cold tier for recall (worker::GatherColdEntries, `newest` the warm start's
  // share): empty without recall or a history. Its time counts as load time.
  std::vector<model::KvHead> ColdEntries(const TurnRequest& r, const HotSession& s,
                                         std::vector<model::KvHead> newest, TurnStart* start);
  absl::Status LoadDeliveryInto(const TurnRequest& r, std::optional<HotSession>& hot,
                                HotSession* s);
  absl::Status ApplyDeltaTo(const TurnRequest& r, const worker::Delivery& d,
                            std::optional<HotSession>& hot, HotSession* s);
  void Store(const TurnRequest& r, const HotSession& s, worker::TierScores tiers,
             TurnResult* result);

  const model::Model& model_;
  kernels::ThreadPool& pool_;
  cache_client::CacheClient* const cache_;
  worker::DeliveryInbox* const inbox_;
  HotSessions& hot_;
  const TurnRunnerOptions options_;
  worker::ScorerCache scorers_;
  worker::Engine engine_;  // every use of the model: prefills between steps, decodes batched
};

}  // namespace glimpse::decode_worker
