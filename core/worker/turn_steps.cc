#include "core/worker/turn_steps.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/recall.h"

namespace glimpse::worker {
namespace {

using Clock = std::chrono::steady_clock;

TierScores SplitScores(eviction::EvictionResult& r) {
  TierScores out;
  for (size_t l = 0; l < r.scores.size(); ++l) {
    for (size_t h = 0; h < r.scores[l].size(); ++h) {
      const std::vector<float>& all = r.scores[l][h];
      const std::vector<int64_t>& kept = r.kept[l][h];
      std::vector<float> kept_scores;
      kept_scores.reserve(kept.size());
      for (int64_t i : kept) kept_scores.push_back(all[i]);
      out.retained.push_back(std::move(kept_scores));
      out.evicted.push_back(std::move(r.evicted_scores[l][h]));
      out.evicted_entries.push_back(std::move(r.evicted[l][h]));
    }
  }
  return out;
}

// `add` merged into `into` by position (eviction::AddMissingEntries), each entry keeping its
// score.
void MergeByPosition(model::KvHead& into, std::vector<float>& into_scores, const model::KvHead& add,
                     const std::vector<float>& add_scores) {
  if (add.size() == 0) return;
  std::unordered_map<int32_t, float> score;
  for (int64_t i = 0; i < into.size(); ++i) score[into.positions[i]] = into_scores[i];
  for (int64_t i = 0; i < add.size(); ++i) score[add.positions[i]] = add_scores[i];
  eviction::AddMissingEntries(into, add);
  into_scores.resize(into.positions.size());
  for (size_t i = 0; i < into.positions.size(); ++i) into_scores[i] = score[into.positions[i]];
}

int64_t MaxEntriesAfter(const model::KvCache& cache, int64_t new_tokens) {
  int64_t most = 0;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      most = std::max(most, cache.size(l, h) + new_tokens);
    }
  }
  return most;
}

bool HasEntries(std::span<const model::KvHead> heads) {
  return std::any_of(heads.begin(), heads.end(),
                     [](const model::KvHead& h) { return h.size() > 0; });
}

// The evicted pages of `state`, decoded, one KvHead per (layer, kv-head) of `shape`.
absl::StatusOr<std::vector<model::KvHead>> EvictedEntries(const cache_client::State& state,
                                                          const model::KvCache& shape) {
  model::KvCache evicted(shape.n_layers(), shape.n_kv_heads(), shape.head_dim());
  RETURN_IF_ERROR(
      kvstate::LoadPages(state.manifest, state.pages, kvstate::LoadTiers::kEvicted, &evicted));
  std::vector<model::KvHead> out;
  for (int32_t l = 0; l < shape.n_layers(); ++l) {
    for (int32_t h = 0; h < shape.n_kv_heads(); ++h) out.push_back(evicted.Read(l, h));
  }
  return out;
}

}  // namespace

kvstate::Fingerprint FingerprintOf(const model::Model& model) {
  // Model::fingerprint() is always 32 hex digits (weight_loader.cc).
  return *kvstate::FingerprintFromHex(model.fingerprint());
}

absl::Status ValidateConversation(const model::Model& model, std::span<const int32_t> tokens) {
  const int32_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " is ", tokens[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  const int64_t context = model.config().context_length;
  if (static_cast<int64_t>(tokens.size()) >= context) {
    return absl::InvalidArgumentError(absl::StrCat("the conversation has ", tokens.size(),
                                                   " tokens; the model's context is ", context,
                                                   " (one more is needed to generate)"));
  }
  return absl::OkStatus();
}

std::optional<StoredPrefix> LoadStoredPrefix(cache_client::CacheClient& cache,
                                             const model::Model& model, kernels::ThreadPool& pool,
                                             const model::SequenceOptions& options,
                                             const kvstate::NamespaceKey& ns,
                                             std::span<const int32_t> prefix,
                                             std::string_view session_id, bool with_cold) {
  const auto t0 = Clock::now();
  const std::string session(session_id);
  absl::StatusOr<cache_client::LookupMatch> match = cache.Lookup(ns, prefix);
  if (!match.ok()) {
    log::Warning("cache lookup failed; recomputing",
                 {{"session", session}, {"error", match.status().ToString()}});
    return std::nullopt;
  }
  if (!match->found || match->token_count == 0) return std::nullopt;
  absl::StatusOr<cache_client::State> state = cache.Get(ns, match->key, FingerprintOf(model));
  if (!state.ok()) {
    log::Warning("cache get failed; recomputing",
                 {{"session", session}, {"error", state.status().ToString()}});
    return std::nullopt;
  }
  StoredPrefix out;
  out.session = std::make_unique<model::Sequence>(model, pool, options);
  absl::Status loaded = kvstate::LoadPages(state->manifest, state->pages,
                                           kvstate::LoadTiers::kRetained, &out.session->cache());
  if (loaded.ok()) loaded = out.session->Resume(static_cast<int32_t>(match->token_count));
  if (!loaded.ok()) {
    log::Warning("stored state unusable; recomputing",
                 {{"session", session}, {"error", loaded.ToString()}});
    return std::nullopt;
  }
  if (with_cold) {
    absl::StatusOr<std::vector<model::KvHead>> cold = EvictedEntries(*state, out.session->cache());
    if (cold.ok()) {
      out.cold = *std::move(cold);
    } else {
      log::Warning("evicted pages unusable; they are fetched again for recall",
                   {{"session", session}, {"error", cold.status().ToString()}});
    }
  }
  out.token_count = static_cast<int32_t>(match->token_count);
  out.load_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

std::vector<model::KvHead> GatherColdEntries(cache_client::CacheClient& cache,
                                             const model::Model& model,
                                             const kvstate::NamespaceKey& ns,
                                             std::span<const int32_t> history,
                                             const model::KvCache& hot, std::string_view session_id,
                                             std::vector<model::KvHead> newest) {
  const std::string session(session_id);
  auto failed = [&](std::string_view what, const absl::Status& status) {
    log::Warning(absl::StrCat("cold pages unavailable (", std::string(what),
                              "); recall goes on without them"),
                 {{"session", session}, {"error", status.ToString()}});
  };
  const int32_t hkv = hot.n_kv_heads();
  std::vector<model::KvHead> cold(static_cast<size_t>(hot.n_layers()) * hkv);
  std::vector<model::KvHead> held(cold.size());  // positions only: what the session holds
  for (size_t i = 0; i < held.size(); ++i) {
    const std::span<const int32_t> p = hot.positions(i / hkv, i % hkv);
    held[i].positions.assign(p.begin(), p.end());
  }
  auto add = [&](const std::vector<model::KvHead>& evicted) {  // newer states first
    for (size_t i = 0; i < cold.size(); ++i) {
      eviction::AddMissingEntries(cold[i], evicted[i], held[i]);
    }
  };
  size_t n = history.size();
  size_t links = 0;  // states taken into the cold tier
  if (newest.size() == cold.size()) {
    add(newest);
    n = history.size() - 1;
    links = 1;
  }
  // The states of shorter and shorter prefixes: each lookup asks below the last match.
  std::vector<cache_client::GetSpec> states;
  while (n > 0 && links + states.size() < kMaxColdStates) {
    absl::StatusOr<cache_client::LookupMatch> match = cache.Lookup(ns, history.first(n));
    if (!match.ok()) {
      failed("lookup", match.status());
      break;
    }
    if (!match->found || match->token_count == 0) break;
    states.push_back({.ns = ns, .key = match->key, .model = FingerprintOf(model), .pages = {}});
    n = match->token_count - 1;
  }
  if (states.empty()) return cold;
  absl::StatusOr<std::vector<cache_client::State>> got = cache.GetMany(states);
  if (!got.ok()) {
    failed("get", got.status());
    return cold;
  }
  for (const cache_client::State& state : *got) {  // newest first: its copy of an entry wins
    absl::StatusOr<std::vector<model::KvHead>> evicted = EvictedEntries(state, hot);
    if (evicted.ok()) {
      add(*evicted);
    } else {
      failed("a stored state", evicted.status());
    }
  }
  return cold;
}

bool Recalls(const eviction::Scorer* scorer, const PrefillLimits& limits) {
  return scorer != nullptr && limits.recall_share > 0.0 &&
         (scorer->needs() & eviction::kAccumulatedAttention) == 0;
}

absl::StatusOr<PolicyPrefill> PrefillWithPolicy(model::Sequence& session,
                                                std::span<const int32_t> fresh,
                                                const Method& method, const Policy& policy,
                                                const PrefillLimits& limits,
                                                std::span<const model::KvHead> cold) {
  const model::KvCache& cache = session.cache();
  const eviction::Scorer* scorer = method.scorer;
  PolicyPrefill out;
  const int64_t n_new = static_cast<int64_t>(fresh.size());
  out.total_entries = cache.TotalEntries() + n_new * cache.n_layers() * cache.n_kv_heads();
  if (scorer != nullptr) {
    const eviction::SelectionOptions selection = eviction::SelectionFor(
        *method.settings, scorer->window(), policy.budget_ratio, session.next_position() + n_new);
    const bool recalls = Recalls(scorer, limits) && HasEntries(cold);
    const eviction::RecallRequest recall{
        .cold = cold,
        .candidate_tokens = static_cast<int64_t>(
            std::ceil(limits.recall_share * static_cast<double>(selection.budget_tokens))),
        .page_tokens = limits.recall_page_tokens};
    if (recalls || MaxEntriesAfter(cache, n_new) > selection.budget_tokens) {
      ASSIGN_OR_RETURN(eviction::EvictionResult ev,
                       eviction::PrefillAndEvict(session, fresh, *scorer, selection,
                                                 recalls ? &recall : nullptr));
      out.logits = std::move(ev.last_logits);
      out.tiers = SplitScores(ev);
      out.recall_candidates = ev.recall_candidates;
      out.recalled = ev.recalled;
      return out;
    }
  }
  ASSIGN_OR_RETURN(out.logits, session.Forward(fresh));
  session.cache().Seal();  // nothing is evicted: the rows are final
  return out;
}

absl::StatusOr<PolicyPrefill> PrefillTurn(model::Sequence& session, std::span<const int32_t> fresh,
                                          const Method& method, const Policy& policy,
                                          const PrefillLimits& limits,
                                          std::span<const model::KvHead> cold) {
  if (fresh.size() < 2) return PrefillWithPolicy(session, fresh, Method{}, policy, limits);
  const std::span<const int32_t> last = fresh.last(1);
  ASSIGN_OR_RETURN(PolicyPrefill out, PrefillWithPolicy(session, fresh.first(fresh.size() - 1),
                                                        method, policy, limits, cold));
  out.total_entries += int64_t{session.cache().n_layers()} * session.cache().n_kv_heads();
  ASSIGN_OR_RETURN(out.logits, session.Forward(last));
  session.cache().Seal();  // the turn's rows are final: group formats quantise their full pages
  return out;
}

void AddEviction(TierScores& tiers, eviction::EvictionResult&& eviction) {
  TierScores more = SplitScores(eviction);
  if (tiers.evicted_entries.empty()) {
    tiers = std::move(more);
    return;
  }
  tiers.retained = std::move(more.retained);
  for (size_t i = 0; i < more.evicted_entries.size(); ++i) {
    MergeByPosition(tiers.evicted_entries[i], tiers.evicted[i], more.evicted_entries[i],
                    more.evicted[i]);
  }
}

absl::StatusOr<kvstate::EncodedState> EncodeSessionState(const model::Model& model,
                                                         const model::KvCache& cache,
                                                         TierScores tiers,
                                                         const kvstate::NamespaceKey& ns,
                                                         std::span<const int32_t> tokens,
                                                         kvpage::Codec codec, int64_t page_tokens) {
  // Entries without a score have none because they came after the scoring: they rank with the
  // best (+inf normalises to 1).
  if (!tiers.retained.empty()) {
    const int64_t heads = int64_t{cache.n_layers()} * cache.n_kv_heads();
    for (int64_t i = 0; i < heads; ++i) {
      const int64_t have = cache.size(i / cache.n_kv_heads(), i % cache.n_kv_heads());
      tiers.retained[i].resize(have, std::numeric_limits<float>::infinity());
    }
  }
  kvstate::StateIdentity id;
  id.namespace_key = ns;
  id.model = FingerprintOf(model);
  id.architecture = model.config().architecture;
  id.token_count = static_cast<uint32_t>(tokens.size());
  id.state_key = kvstate::MakeStateKey(ns, tokens);
  kvstate::StateContent content{.retained = &cache,
                                .evicted = tiers.evicted_entries,
                                .retained_scores = tiers.retained,
                                .evicted_scores = tiers.evicted};
  return kvstate::EncodeState(content, id, {.codec = codec, .page_tokens = page_tokens});
}

absl::Status StoreState(cache_client::CacheClient& cache, const kvstate::EncodedState& state,
                        std::span<const int32_t> tokens, std::string_view session_id) {
  absl::Status stored = cache.Put(state.manifest, tokens, state.pages()).status();
  if (absl::IsAlreadyExists(stored)) {
    // These tokens under this policy are stored already, from another history (evictions at
    // other turn boundaries give another payload): that state serves them as well.
    log::Info(
        "a state for these tokens is stored already; keeping it",
        {{"session", std::string(session_id)}, {"tokens", static_cast<long long>(tokens.size())}});
    return absl::OkStatus();
  }
  return stored;
}

uint64_t RetainedBytes(const kvstate::Manifest& manifest) {
  uint64_t bytes = 0;
  for (const kvstate::PageRef& p : manifest.pages) {
    if (p.tier == kvstate::Tier::kRetained) bytes += p.bytes;
  }
  return bytes;
}

}  // namespace glimpse::worker
