// A turn's flow on a worker, both kinds, in one place (DESIGN.md §1): the decode worker's turns
// (Decode) and the prefill worker's jobs (Prefill) run here, top to bottom in turn_runner.cc; the
// services adapt gRPC to them and nothing more. Every use of the model goes through one
// worker::Engine (the scheduler): prefills in arrival order (a long one shares the model after its
// first chunks), decodes batched into shared steps that ride in the prefill chunks' passes.
//
// A turn is in one of these states at a time (TurnState; counted on /metrics):
//   waiting     admitted by the checks, waiting for the session's previous turn to end
//   loading     finding its start state (a delivery, the hot copy, a stored prefix, the cold tier)
//   prefilling  its prompt at the engine (including the engine's wait for room in the KV pool)
//   decoding    generating and streaming tokens in the engine's shared steps
//   preempted   its KV parked on the cache node because the pool was full; it resumes later
//   storing     writing its state to the cache node
//   shipping    sending its kept pages to the decode worker (a prefill job)
// and done when it returns.
//
// Decode (a decode worker's turn of a session):
//   1. Start state: a prefill worker's delivery when the request names one (the prefill worker
//      prefilled and evicted all but the last token); else the worker's hot copy when its tokens
//      are a proper prefix of the request's (hot); else the longest stored prefix on the cache
//      node, its retained pages loaded into a fresh session (warm); else an empty session
//      (recompute). A delivery that does not come or does not fit, or a cache node that cannot be
//      reached, is logged and treated as a miss: the turn falls back instead of failing.
//   2. Prefill the remaining tokens with the policy: no eviction ("none", or after a delivery,
//      whose eviction the prefill worker ran), or prefill with eviction (turn_steps.h): every
//      entry, history and new, scored, the budget max(ceil(ratio × tokens), sinks + window) kept
//      per (layer, kv-head).
//   3. Decode, streaming tokens (a callback returning false, e.g. a cancelled client, stops it).
//      When the KV pool is full even after idle hot copies went, the engine may preempt the
//      decode: its KV waits on the cache node (CacheParking) and comes back when there is room,
//      the stream paused meanwhile, the tokens unchanged.
//   4. Write the new state — the hot cache as retained pages and this turn's evicted entries as
//      evicted pages, importance from the scores — to the cache node under the state key of the
//      tokens it summarises, and wait for the node's acknowledgement (so a turn reported done with
//      a state key is durable; a state already stored under that key, made from another history,
//      stands); then keep the session hot. A node that is unavailable is retried for store_retry;
//      after that the turn ends without a state key, its KV hot only (logged).
// Errors found before the turn starts (token ids outside the vocabulary, a conversation that fills
// the context, bad sampling, an unusable scorer, a turn of the session still running after
// session_wait) are InvalidArgument / FailedPrecondition with the session untouched; a failure once
// the prefill ran drops the hot copy (what the cache node stored is intact, so the next turn goes
// warm). Turns of one session run one after the other (a turn waits up to session_wait).
//
// Prefill (a prefill worker's job for a decode worker's turn):
//   1. Start state: the longest prefix of the conversation's first n − 1 tokens (of its first
//      hot_tokens when the job names the decode worker's hot copy) stored on the cache node, its
//      retained pages loaded (warm); else nothing (recompute). A cache node that fails is logged
//      and counts as a miss.
//   2. Prefill tokens [reused, n − 1) under the session's eviction policy. The last token is the
//      decode worker's: it prefills it for the logits it samples from.
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
// Decode and Prefill may be called from many threads at once: loading, storing, shipping and
// streaming run on the callers' threads, beside the engine's compute. Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cache_client/cache_client.h"
#include "core/common/metrics.h"
#include "core/eviction/scorer.h"
#include "core/model/generator.h"
#include "core/model/model.h"
#include "core/model/sampler.h"
#include "core/transport/transport.h"
#include "core/worker/engine.h"
#include "core/worker/hot_sessions.h"
#include "core/worker/policy.h"
#include "core/worker/prefill_delivery.h"
#include "core/worker/turn_steps.h"

namespace glimpse::worker {

enum class TurnState {
  kWaiting,
  kLoading,
  kPrefilling,
  kDecoding,
  kPreempted,
  kStoring,
  kShipping
};
inline constexpr int kTurnStates = 7;
std::string_view TurnStateName(TurnState s);

// Where a decode turn's start state came from.
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
  // Nonzero: a prefill worker's delivery (prefill_delivery.h) to start from.
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

struct PrefillJob {
  std::string session_id;
  kvstate::NamespaceKey namespace_key{};
  std::vector<int32_t> tokens;
  Policy policy;
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

struct TurnRunnerOptions {
  int64_t page_tokens = 64;
  int32_t max_output_tokens = 4096;
  int32_t prefill_chunk_tokens = 256;  // running decodes and other prefills go between chunks
  PrefillLimits limits;                // recall
  std::string lookahead_module;        // the LookaheadKV module for method "lookahead"
  eviction::EvictionProfile profile;   // each method's settings
  // Where sessions' KV lives (the worker's kv_memory); nullptr: a private fp32 pool per session.
  model::KvPool* kv_pool = nullptr;
  absl::Duration delivery_timeout = absl::Seconds(10);  // wait for a prefill worker's delivery
  // How long a turn waits for the session's previous turn (cancelled by its client, still
  // storing) to end before it fails with FailedPrecondition.
  absl::Duration session_wait = absl::Seconds(30);
  absl::Duration ship_timeout = absl::Seconds(30);  // a prefill job's delivery
  // How long a decode turn's state write retries a cache node that is unavailable (restarting)
  // before the turn ends with its state hot only (TurnResult::state_key unset).
  absl::Duration store_retry = absl::Seconds(5);
};

// What a worker's turns use besides the model; none is owned, each outlives the runner.
struct TurnParts {
  cache_client::CacheClient* cache = nullptr;  // null: nothing loaded or stored
  HotSessions* hot = nullptr;                  // a decode worker's hot copies (Decode needs it)
  DeliveryInbox* inbox = nullptr;  // a decode worker's deliveries; null: a named one is a miss
  transport::Transport* ship = nullptr;  // a prefill worker's, not shared (Prefill needs it)
};

struct TurnStats {
  std::array<int64_t, kTurnStates> in_state{};  // turns in each state now (TurnState order)
  int64_t done = 0;                             // turns that returned, since start
};

class TurnRunner {
 public:
  TurnRunner(const model::Model& model, kernels::ThreadPool& pool, TurnParts parts,
             TurnRunnerOptions options);

  absl::StatusOr<TurnResult> Decode(const TurnRequest& request, const TurnCallbacks& callbacks);
  absl::StatusOr<PrefillOutcome> Prefill(const PrefillJob& job);

  EngineStats engine_stats() const { return engine_.Stats(); }
  TurnStats stats() const;

  // Test hook: the engine, so that a test can hold the model (Engine::Run) while turns queue.
  Engine& TEST_engine() { return engine_; }

 private:
  class Tracker;
  // A decode turn's start state (step 1); `cold` (may be null): where a warm start leaves its
  // state's evicted entries, fetched with it.
  HotSession StartState(const TurnRequest& r, std::optional<HotSession> hot, TurnStart* start,
                        std::vector<model::KvHead>* cold);
  std::optional<HotSession> LoadWarm(const TurnRequest& r, TurnStart* start,
                                     std::vector<model::KvHead>* cold);
  // A delta delivery applies to `hot` (which it then empties into the result); a whole one
  // seeds a fresh session.
  std::optional<HotSession> LoadDelivery(const TurnRequest& r, std::optional<HotSession>& hot,
                                         TurnStart* start);
  absl::Status LoadDeliveryInto(const TurnRequest& r, std::optional<HotSession>& hot,
                                HotSession* s);
  absl::Status ApplyDeltaTo(const TurnRequest& r, const Delivery& d, std::optional<HotSession>& hot,
                            HotSession* s);
  // A new session's options for `policy`: the worker's pool, the policy codec's hot format.
  model::SequenceOptions SessionOptions(const Policy& policy) const;
  // Whether a turn with `scorer` recalls: a cache node and worker::Recalls.
  bool Recalls(const eviction::Scorer* scorer) const;
  // The cold tier of `history` for recall (GatherColdEntries, `newest` a warm start's share):
  // empty without a history. Its time is added to `load_seconds`.
  std::vector<model::KvHead> ColdEntries(const kvstate::NamespaceKey& ns,
                                         std::span<const int32_t> history,
                                         const model::Sequence& session,
                                         std::string_view session_id,
                                         std::vector<model::KvHead> newest, double* load_seconds);
  // Writes a decode turn's state to the cache node; a failure leaves the session hot only.
  void Store(const TurnRequest& r, const HotSession& s, TierScores tiers, TurnResult* result);
  absl::Status CheckJob(const PrefillJob& job) const;
  // A prefill job's delivery: the state's retained pages, or (with `base`, the hot copy's
  // positions per head) the delta against it.
  absl::StatusOr<OutgoingDelivery> MakeJobDelivery(
      const PrefillJob& job, const kvstate::EncodedState& state, const model::KvCache& cache,
      const std::vector<std::vector<int32_t>>* base) const;
  absl::Status Ship(const PrefillJob& job, const OutgoingDelivery& delivery, PrefillOutcome* out);

  const model::Model& model_;
  kernels::ThreadPool& pool_;
  const TurnParts parts_;
  const TurnRunnerOptions options_;
  ScorerCache scorers_;
  std::optional<transport::PeerMap> peers_;  // with a ship transport
  mutable absl::Mutex stats_mu_;
  TurnStats stats_ ABSL_GUARDED_BY(stats_mu_);
  Engine engine_;  // every use of the model: prefills, and decodes batched
};

// Writes `s` as <prefix>_turns_in_state{state} gauges and a <prefix>_turns_done_total counter.
void AddTurnMetrics(const TurnStats& s, std::string_view prefix, metrics::SampleWriter& w);

}  // namespace glimpse::worker
