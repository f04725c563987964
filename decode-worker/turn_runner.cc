#include "decode-worker/turn_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/eviction/pipeline.h"
#include "core/kvstate/cache_pages.h"
#include "core/model/generator.h"
#include "core/model/text_stream.h"

namespace glimpse::decode_worker {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Scores of one turn's eviction, split per head into the kept and the evicted entries, in the
// layout kvstate::EncodeState takes (index layer · Hkv + kv_head).
struct TierScores {
  std::vector<std::vector<float>> retained;
  std::vector<std::vector<float>> evicted;
  std::vector<model::KvHead> evicted_entries;
};

TierScores SplitScores(eviction::EvictionResult& r) {
  TierScores out;
  for (size_t l = 0; l < r.scores.size(); ++l) {
    for (size_t h = 0; h < r.scores[l].size(); ++h) {
      const std::vector<float>& all = r.scores[l][h];
      const std::vector<int64_t>& kept = r.kept[l][h];
      std::vector<float> kept_scores, evicted_scores;
      size_t k = 0;
      for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) {
        if (k < kept.size() && kept[k] == i) {
          kept_scores.push_back(all[i]);
          ++k;
        } else {
          evicted_scores.push_back(all[i]);
        }
      }
      out.retained.push_back(std::move(kept_scores));
      out.evicted.push_back(std::move(evicted_scores));
      out.evicted_entries.push_back(std::move(r.evicted[l][h]));
    }
  }
  return out;
}

int64_t MaxEntriesAfter(const model::KvCache& cache, int64_t new_tokens) {
  int64_t most = 0;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      most = std::max(most, cache.head(l, h).size() + new_tokens);
    }
  }
  return most;
}

}  // namespace

absl::StatusOr<Policy> ParsePolicy(std::string_view method, double budget_ratio,
                                   std::string_view codec) {
  Policy p;
  if (!method.empty() && method != "none") {
    const std::vector<std::string> known = eviction::KnownScorers();
    if (std::find(known.begin(), known.end(), method) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("policy.method \"", std::string(method),
                                                     "\" is not a scorer; known: none, ",
                                                     absl::StrJoin(known, ", ")));
    }
    if (!(budget_ratio > 0.0 && budget_ratio <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy.budget_ratio must be in (0, 1], got ", budget_ratio));
    }
    p.method = std::string(method);
    p.budget_ratio = budget_ratio;
  }
  if (!codec.empty()) {
    const kvpage::CodecInfo* info = kvpage::FindCodecByName(codec);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy.codec \"", std::string(codec),
                       "\" is not a codec (fp16, bf16, fp8_e4m3, int8, kivi4, kivi2)"));
    }
    p.codec = info->id;
  }
  return p;
}

std::string_view SourceName(Source s) {
  switch (s) {
    case Source::kHot:
      return "hot";
    case Source::kWarm:
      return "warm";
    case Source::kRecompute:
      return "recompute";
  }
  return "unknown";
}

TurnRunner::TurnRunner(const model::Model& model, kernels::ThreadPool& pool,
                       cache_client::CacheClient* cache, HotSessions& hot,
                       TurnRunnerOptions options)
    : model_(model), pool_(pool), cache_(cache), hot_(hot), options_(std::move(options)) {
  // Model::fingerprint() is always 32 hex digits (weight_loader.cc).
  fingerprint_ = *kvstate::FingerprintFromHex(model.fingerprint());
}

absl::Status TurnRunner::ValidateTokens(std::span<const int32_t> tokens) const {
  const int32_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " is ", tokens[i],
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  const int64_t context = model_.config().context_length;
  if (static_cast<int64_t>(tokens.size()) >= context) {
    return absl::InvalidArgumentError(absl::StrCat("the conversation has ", tokens.size(),
                                                   " tokens; the model's context is ", context,
                                                   " (one more is needed to generate)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const eviction::Scorer*> TurnRunner::ScorerFor(const Policy& policy) {
  std::lock_guard<std::mutex> lock(scorers_mu_);
  auto it = scorers_.find(policy.method);
  if (it != scorers_.end()) return it->second.get();
  eviction::ScorerConfig config;
  config.method = policy.method;
  if (policy.method == "lookahead") {
    if (options_.lookahead_module.empty()) {
      return absl::FailedPreconditionError(
          "policy.method \"lookahead\" needs a LookaheadKV module; this worker has none "
          "(config key lookahead_module)");
    }
    config.module_path = options_.lookahead_module;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<eviction::Scorer> scorer, eviction::CreateScorer(config));
  const eviction::Scorer* out = scorer.get();
  scorers_.emplace(policy.method, std::move(scorer));
  return out;
}

std::optional<HotSession> TurnRunner::LoadWarm(const TurnRequest& r, TurnStart* start) {
  if (cache_ == nullptr) return std::nullopt;
  const auto t0 = Clock::now();
  // The last token must be prefilled for its logits: look up at most n − 1 tokens.
  std::span<const int32_t> prefix(r.tokens.data(), r.tokens.size() - 1);
  absl::StatusOr<cache_client::LookupMatch> match = cache_->Lookup(r.namespace_key, prefix);
  if (!match.ok()) {
    log::Warning("cache lookup failed; recomputing",
                 {{"session", r.session_id}, {"error", match.status().ToString()}});
    return std::nullopt;
  }
  if (!match->found || match->token_count == 0) return std::nullopt;
  absl::StatusOr<cache_client::State> state = cache_->Get(match->key, fingerprint_);
  if (!state.ok()) {
    log::Warning("cache get failed; recomputing",
                 {{"session", r.session_id}, {"error", state.status().ToString()}});
    return std::nullopt;
  }
  HotSession s;
  s.session = std::make_unique<model::Session>(model_, pool_);
  s.namespace_key = r.namespace_key;
  absl::Status loaded = kvstate::LoadPages(state->manifest, state->pages,
                                           kvstate::LoadTiers::kRetained, &s.session->cache());
  if (loaded.ok()) loaded = s.session->Resume(static_cast<int32_t>(match->token_count));
  if (!loaded.ok()) {
    log::Warning("stored state unusable; recomputing",
                 {{"session", r.session_id}, {"error", loaded.ToString()}});
    return std::nullopt;
  }
  s.tokens.assign(r.tokens.begin(), r.tokens.begin() + match->token_count);
  start->source = Source::kWarm;
  start->load_seconds = SecondsSince(t0);
  return s;
}

absl::StatusOr<HotSession> TurnRunner::StartState(const TurnRequest& r,
                                                  std::optional<HotSession> hot, TurnStart* start) {
  const bool extends = hot && hot->namespace_key == r.namespace_key &&
                       hot->tokens.size() < r.tokens.size() &&
                       std::equal(hot->tokens.begin(), hot->tokens.end(), r.tokens.begin());
  if (extends) {
    start->source = Source::kHot;
    return std::move(*hot);
  }
  if (std::optional<HotSession> warm = LoadWarm(r, start)) return std::move(*warm);
  HotSession fresh;
  fresh.session = std::make_unique<model::Session>(model_, pool_);
  fresh.namespace_key = r.namespace_key;
  start->source = Source::kRecompute;
  return fresh;
}

absl::StatusOr<TurnResult> TurnRunner::Run(const TurnRequest& r, const TurnCallbacks& callbacks) {
  const auto t0 = r.received;
  if (r.tokens.empty()) return absl::InvalidArgumentError("tokens must not be empty");
  if (r.max_tokens < 1 || r.max_tokens > options_.max_output_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.max_tokens must be in [1, ",
                                                   options_.max_output_tokens, "], got ",
                                                   r.max_tokens));
  }
  RETURN_IF_ERROR(ValidateTokens(r.tokens));
  ASSIGN_OR_RETURN(model::Sampler sampler, model::Sampler::Create(r.sampling));
  const eviction::Scorer* scorer = nullptr;
  if (!r.policy.method.empty()) {
    ASSIGN_OR_RETURN(scorer, ScorerFor(r.policy));
  }

  ASSIGN_OR_RETURN(std::optional<HotSession> checked_out, hot_.Checkout(r.session_id));
  TurnResult result;
  absl::StatusOr<HotSession> state = StartState(r, std::move(checked_out), &result.start);
  if (!state.ok()) {
    hot_.Abandon(r.session_id);
    return state.status();
  }
  HotSession s = std::move(*state);
  model::Session& session = *s.session;
  result.start.reused_tokens = static_cast<int32_t>(s.tokens.size());
  std::span<const int32_t> fresh(r.tokens.data() + s.tokens.size(),
                                 r.tokens.size() - s.tokens.size());
  result.start.prefilled_tokens = static_cast<int32_t>(fresh.size());

  // Prefill, with eviction when the policy has a scorer and the budget is below what the heads
  // would hold.
  const auto t_prefill = Clock::now();
  std::vector<float> logits;
  TierScores tiers;
  const int64_t total_tokens = session.next_position() + static_cast<int64_t>(fresh.size());
  result.start.total_entries = session.cache().TotalEntries() + static_cast<int64_t>(fresh.size()) *
                                                                    session.cache().n_layers() *
                                                                    session.cache().n_kv_heads();
  bool evicting = false;
  eviction::SelectionOptions selection;
  if (scorer != nullptr) {
    selection.sinks = options_.sinks;
    selection.window = scorer->window() > 0 ? scorer->window() : options_.window;
    selection.budget_tokens =
        std::max<int64_t>(static_cast<int64_t>(std::ceil(r.policy.budget_ratio * total_tokens)),
                          selection.sinks + selection.window);
    evicting = MaxEntriesAfter(session.cache(), fresh.size()) > selection.budget_tokens;
  }
  absl::Status prefilled;
  if (evicting) {
    absl::StatusOr<eviction::EvictionResult> ev =
        eviction::PrefillAndEvict(session, fresh, *scorer, selection);
    if (ev.ok()) {
      logits = std::move(ev->last_logits);
      tiers = SplitScores(*ev);
    }
    prefilled = ev.status();
  } else {
    absl::StatusOr<std::vector<float>> out = session.Forward(fresh);
    if (out.ok()) logits = std::move(*out);
    prefilled = out.status();
  }
  if (!prefilled.ok()) {
    // A failed prefill may have reset the session (pipeline.h); nothing of it stays hot.
    hot_.Abandon(r.session_id);
    return prefilled;
  }
  s.tokens.assign(r.tokens.begin(), r.tokens.end());
  result.start.prefill_seconds = SecondsSince(t_prefill);
  result.start.kept_entries = session.cache().TotalEntries();
  result.start.ttft_seconds = SecondsSince(t0);  // refined when the first token streams
  if (callbacks.started) callbacks.started(result.start);

  // Decode, streaming each token with the text it completes.
  model::TextStream text(model_.tokenizer());
  bool first = true;
  auto on_token = [&](int32_t token) {
    absl::StatusOr<std::string> piece = text.Push(token);
    if (first) {
      result.start.ttft_seconds = SecondsSince(t0);
      first = false;
    }
    const int32_t ids[] = {token};
    return callbacks.tokens ? callbacks.tokens(ids, piece.ok() ? *piece : std::string()) : true;
  };
  absl::StatusOr<model::GenerationResult> gen =
      model::DecodeFrom(session, sampler, std::move(logits), r.max_tokens, on_token);
  if (!gen.ok()) {
    hot_.Abandon(r.session_id);
    return gen.status();
  }
  if (absl::StatusOr<std::string> rest = text.Finish();
      rest.ok() && !rest->empty() && callbacks.tokens) {
    callbacks.tokens({}, *rest);
  }
  result.stop = gen->stop;
  result.generated_tokens = static_cast<int32_t>(gen->tokens.size());
  result.decode_tokens_per_second = gen->tokens.size() / std::max(gen->decode_seconds, 1e-9);
  // Every generated token but the last sampled one is in the cache now.
  const size_t fed = static_cast<size_t>(session.next_position()) - s.tokens.size();
  s.tokens.insert(s.tokens.end(), gen->tokens.begin(), gen->tokens.begin() + fed);

  const model::KvCache& cache = session.cache();
  const int64_t heads = int64_t{cache.n_layers()} * cache.n_kv_heads();
  result.kv_tokens = static_cast<int64_t>(s.tokens.size());
  result.kv_entries = cache.TotalEntries();
  result.hot_tokens = (result.kv_entries + heads - 1) / heads;
  result.full_fp16_bytes =
      static_cast<uint64_t>(result.kv_tokens) * heads * cache.head_dim() * 2 * sizeof(uint16_t);

  if (cache_ != nullptr) {
    // Decoded tokens have no scores; they rank with the best (+inf normalises to 1).
    if (!tiers.retained.empty()) {
      for (int64_t i = 0; i < heads; ++i) {
        const int64_t have = cache.head(i / cache.n_kv_heads(), i % cache.n_kv_heads()).size();
        tiers.retained[i].resize(have, std::numeric_limits<float>::infinity());
      }
    }
    kvstate::StateIdentity id;
    id.namespace_key = s.namespace_key;
    id.model = fingerprint_;
    id.architecture = model_.config().architecture;
    id.token_count = static_cast<uint32_t>(s.tokens.size());
    id.state_key = kvstate::MakeStateKey(s.namespace_key, s.tokens);
    kvstate::StateContent content{.retained = &cache,
                                  .evicted = tiers.evicted_entries,
                                  .retained_scores = tiers.retained,
                                  .evicted_scores = tiers.evicted};
    kvstate::EncodeStateOptions encode{.codec = r.policy.codec,
                                       .page_tokens = options_.page_tokens};
    absl::StatusOr<kvstate::EncodedState> encoded = kvstate::EncodeState(content, id, encode);
    absl::Status stored = encoded.status();
    if (encoded.ok()) {
      stored = cache_->Put(encoded->manifest, s.tokens, encoded->pages()).status();
      if (absl::IsAlreadyExists(stored)) {
        // These tokens under this policy are stored already, from another history (evictions at
        // other turn boundaries give another payload): that state serves them as well.
        log::Info("a state for these tokens is stored already; keeping it",
                  {{"session", r.session_id}, {"tokens", static_cast<long long>(s.tokens.size())}});
        stored = absl::OkStatus();
      }
    }
    if (stored.ok()) {
      result.state_key = id.state_key;
      result.state_bytes = encoded->bytes.size();
      for (const kvstate::PageRef& p : encoded->manifest.pages) {
        if (p.tier == kvstate::Tier::kRetained) result.retained_bytes += p.bytes;
      }
    } else {
      log::Error("storing the session state failed; it stays hot only",
                 {{"session", r.session_id}, {"error", stored.ToString()}});
    }
  }
  hot_.Return(r.session_id, std::move(s));
  return result;
}

}  // namespace glimpse::decode_worker
