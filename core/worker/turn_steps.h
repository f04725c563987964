// The steps of a turn that prefill and decode workers share (DESIGN.md §1):
//   ValidateConversation   token ids inside the vocabulary, room left in the context;
//   LoadStoredPrefix       the longest stored prefix of a conversation from a cache node, its
//                          retained pages loaded into a fresh session (a warm start);
//   PrefillWithPolicy      prefill new tokens under the session's eviction policy: every entry of
//                          each head, history and new, scored and the budget kept
//                          (core/eviction/pipeline.h), or a plain forward when nothing would go;
//   EncodeSessionState     the session's cache (retained pages) and this prefill's evicted entries
//                          (evicted pages, the cold tier) as a stored state, importance from the
//                          scores (core/kvstate/cache_pages.h);
//   StoreState             that state written to a cache node, acknowledged once durable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache_client/cache_client.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/scorer.h"
#include "core/kvstate/cache_pages.h"
#include "core/model/model.h"
#include "core/model/sequence.h"
#include "core/worker/policy.h"

namespace glimpse::worker {

// The fingerprint states made by `model` carry.
kvstate::Fingerprint FingerprintOf(const model::Model& model);

// InvalidArgument for an id outside the vocabulary or a conversation with no room left to generate.
absl::Status ValidateConversation(const model::Model& model, std::span<const int32_t> tokens);

struct StoredPrefix {
  std::unique_ptr<model::Sequence> session;  // holds the prefix's retained KV
  int32_t token_count = 0;                   // tokens of the conversation it summarises
  double load_seconds = 0.0;                 // lookup, fetch and decode
  // With `with_cold`: the state's evicted entries, one KvHead per (layer, kv-head), decoded from
  // the same fetch (the newest link of GatherColdEntries); empty otherwise or when they cannot
  // be decoded (logged).
  std::vector<model::KvHead> cold;
};

// The longest stored prefix of `prefix` under `ns`, loaded into a session made with `options`;
// nullopt on a miss. A cache node that
// fails or a stored state that cannot be used is logged and counts as a miss (the caller
// recomputes).
std::optional<StoredPrefix> LoadStoredPrefix(cache_client::CacheClient& cache,
                                             const model::Model& model, kernels::ThreadPool& pool,
                                             const model::SequenceOptions& options,
                                             const kvstate::NamespaceKey& ns,
                                             std::span<const int32_t> prefix,
                                             std::string_view session_id, bool with_cold = false);

// One prefill's scores split per head into the kept and the evicted entries, and the evicted
// entries, in the layout kvstate::EncodeState takes (index layer · Hkv + kv_head). Empty when the
// prefill evicted nothing.
struct TierScores {
  std::vector<std::vector<float>> retained;
  std::vector<std::vector<float>> evicted;
  std::vector<model::KvHead> evicted_entries;
};

// Adds one more eviction of the turn (decode-time eviction, core/eviction/decode_eviction.h) to
// `tiers`: the retained scores become those of the entries it kept, and its evicted entries join
// the earlier ones of each head in position order, with their scores.
void AddEviction(TierScores& tiers, eviction::EvictionResult&& eviction);

// Sinks, recent window, schedule and granularity come with each method (Method::settings); these
// apply to every method.
struct PrefillLimits {
  // Cold-page recall (core/eviction/recall.h): cold entries offered per head as candidates, as a
  // share of the head's budget (0: no recall), in summarised pages of recall_page_tokens entries.
  double recall_share = 0.5;
  int64_t recall_page_tokens = 16;
};

// The cold tier of the conversation `history` (the tokens `hot` summarises): the evicted pages of
// the stored states of its prefixes, newest first (at most kMaxColdStates states; one GetMany),
// without the positions `hot` holds, as one KvHead per (layer, kv-head) in position order. Empty
// when nothing is stored; a node that fails or a state that cannot be used is logged and adds
// nothing (the turn goes on without recall). `newest`, when the caller has it (one KvHead per
// head: StoredPrefix::cold of the state of all of `history`), is that state's share, and the
// walk starts below it instead of fetching it again.
inline constexpr int kMaxColdStates = 16;
std::vector<model::KvHead> GatherColdEntries(cache_client::CacheClient& cache,
                                             const model::Model& model,
                                             const kvstate::NamespaceKey& ns,
                                             std::span<const int32_t> history,
                                             const model::KvCache& hot, std::string_view session_id,
                                             std::vector<model::KvHead> newest = {});

// Whether a turn prefilled with `scorer` recalls cold entries: a scorer, recall_share > 0, and a
// scorer that does not score by the prefill's accumulated attention (pipeline.h). Callers fetch
// the cold tier only then.
bool Recalls(const eviction::Scorer* scorer, const PrefillLimits& limits);

struct PolicyPrefill {
  std::vector<float> logits;  // the last token's
  TierScores tiers;
  int64_t total_entries = 0;      // entries the heads would hold without eviction
  int64_t recall_candidates = 0;  // cold entries offered back (pipeline.h)
  int64_t recalled = 0;           // ... and kept
};

// Prefills `fresh` into `session`. With a method (a scorer), the selection is
// eviction::SelectionFor(settings, ratio, tokens): per (layer, kv-head)
// max(ceil(ratio × tokens), sinks + window), and eviction runs when a head would hold more or
// `cold` (GatherColdEntries; may be empty) has entries to recall: up to recall_share × budget of
// them per head compete for the budget when Recalls(scorer, limits). Afterwards the rows are
// final and the cache is sealed (a KIVI session's full pages quantised, model/kv_cache.h). A
// failed prefill may have reset the session (pipeline.h).
absl::StatusOr<PolicyPrefill> PrefillWithPolicy(model::Sequence& session,
                                                std::span<const int32_t> fresh,
                                                const Method& method, const Policy& policy,
                                                const PrefillLimits& limits,
                                                std::span<const model::KvHead> cold = {});

// A turn's prefill as every worker runs it (Glimpse's convention, as kvpress's pipeline): the
// prompt's tokens but the last are prefilled with eviction (PrefillWithPolicy), then the last is
// run over the evicted cache for the logits decoding starts from. A prefill worker does the first
// part and ships; the decode worker feeds the last token.
absl::StatusOr<PolicyPrefill> PrefillTurn(model::Sequence& session, std::span<const int32_t> fresh,
                                          const Method& method, const Policy& policy,
                                          const PrefillLimits& limits,
                                          std::span<const model::KvHead> cold = {});

// The state of `tokens` (the session's cache holds their KV after eviction): retained pages from
// `cache`, evicted pages from `tiers`. Entries without a score (decoded after the prefill) rank
// with the best.
absl::StatusOr<kvstate::EncodedState> EncodeSessionState(const model::Model& model,
                                                         const model::KvCache& cache,
                                                         TierScores tiers,
                                                         const kvstate::NamespaceKey& ns,
                                                         std::span<const int32_t> tokens,
                                                         kvpage::Codec codec, int64_t page_tokens);

// Puts `state` and waits for the node's acknowledgement. A state already stored under that key
// (the same tokens reached through another history) stands and counts as stored.
absl::Status StoreState(cache_client::CacheClient& cache, const kvstate::EncodedState& state,
                        std::span<const int32_t> tokens, std::string_view session_id);

// Encoded bytes of the state's retained pages: what a decode worker holds and receives.
uint64_t RetainedBytes(const kvstate::Manifest& manifest);

}  // namespace glimpse::worker
