#include "decode-worker/turn_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/eviction/decode_eviction.h"
#include "core/model/generator.h"
#include "core/model/stop_strings.h"
#include "core/model/text_stream.h"
#include "core/worker/cache_parking.h"

namespace glimpse::decode_worker {
namespace {

using Clock = std::chrono::steady_clock;

HotSession EmptySession(const model::Model& model, kernels::ThreadPool& pool,
                        const model::SessionOptions& options, const kvstate::NamespaceKey& ns) {
  HotSession s;
  s.session = std::make_unique<model::Session>(model, pool, options);
  s.namespace_key = ns;
  return s;
}

// Pool bytes a turn may add to `cache` before it ends: every head grown by `rows` entries, or,
// with a cap (decode-time eviction: budget + interval, and never below the head's size after
// `fresh` prompt rows), to at most the cap.
int64_t TurnBytes(const model::KvCache& cache, int64_t rows, int64_t fresh = 0,
                  int64_t cap = std::numeric_limits<int64_t>::max()) {
  const model::KvPool& pool = cache.pool();
  const int64_t P = pool.page_tokens();
  int64_t pages = 0;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) {
      const int64_t n = cache.size(l, h);
      const int64_t peak = std::min(n + rows, std::max(n + fresh, cap));
      pages += (peak + P - 1) / P - (n + P - 1) / P;
    }
  }
  return pages * pool.PageBytes(cache.filling_dtype());
}

}  // namespace

std::string_view SourceName(Source s) {
  switch (s) {
    case Source::kHot:
      return "hot";
    case Source::kWarm:
      return "warm";
    case Source::kRecompute:
      return "recompute";
    case Source::kPrefillWorker:
      return "prefill_worker";
  }
  return "unknown";
}

TurnRunner::TurnRunner(const model::Model& model, kernels::ThreadPool& pool,
                       cache_client::CacheClient* cache, worker::DeliveryInbox* inbox,
                       HotSessions& hot, TurnRunnerOptions options)
    : model_(model),
      pool_(pool),
      cache_(cache),
      inbox_(inbox),
      hot_(hot),
      options_(std::move(options)),
      scorers_(options_.lookahead_module, options_.profile),
      engine_(model, pool,
              {.make_room =
                   [this](int64_t bytes) {
                     // Idle hot copies are stored already: they go first.
                     if (options_.kv_pool != nullptr) hot_.MakeRoom(*options_.kv_pool, bytes);
                   },
               .kv_pool = options_.kv_pool}) {}

std::optional<HotSession> TurnRunner::LoadWarm(const TurnRequest& r, TurnStart* start,
                                               std::vector<model::KvHead>* cold) {
  if (cache_ == nullptr) return std::nullopt;
  // The last token must be prefilled for its logits: look up at most n − 1 tokens.
  std::span<const int32_t> prefix(r.tokens.data(), r.tokens.size() - 1);
  std::optional<worker::StoredPrefix> stored =
      worker::LoadStoredPrefix(*cache_, model_, pool_, SessionOptions(r), r.namespace_key, prefix,
                               r.session_id, cold != nullptr);
  if (!stored) return std::nullopt;
  if (cold != nullptr) *cold = std::move(stored->cold);
  HotSession s;
  s.session = std::move(stored->session);
  s.namespace_key = r.namespace_key;
  s.tokens.assign(r.tokens.begin(), r.tokens.begin() + stored->token_count);
  start->source = Source::kWarm;
  start->load_seconds = stored->load_seconds;
  return s;
}

absl::Status TurnRunner::ApplyDeltaTo(const TurnRequest& r, const worker::Delivery& d,
                                      std::optional<HotSession>& hot, HotSession* s) {
  if (!hot || hot->namespace_key != r.namespace_key ||
      kvstate::MakeStateKey(r.namespace_key, hot->tokens) != d.delta->base_key) {
    return absl::FailedPreconditionError(absl::StrCat(
        "delivery ", r.delivery_id, " is a delta against a hot copy this worker does not hold"));
  }
  RETURN_IF_ERROR(worker::ApplyDelta(*d.delta, d.manifest, d.pages, hot->session->cache()));
  if (absl::Status st = hot->session->Resume(static_cast<int32_t>(d.manifest.token_count));
      !st.ok()) {
    hot.reset();  // the delta is in, its position is not: the copy matches no token sequence
    return st;
  }
  *s = std::move(*hot);
  hot.reset();
  s->tokens.assign(r.tokens.begin(), r.tokens.begin() + d.manifest.token_count);
  return absl::OkStatus();
}

absl::Status TurnRunner::LoadDeliveryInto(const TurnRequest& r, std::optional<HotSession>& hot,
                                          HotSession* s) {
  if (inbox_ == nullptr) {
    return absl::FailedPreconditionError("this worker has no prefill delivery inbox");
  }
  ASSIGN_OR_RETURN(worker::Delivery d,
                   inbox_->Take(r.delivery_id, absl::Now() + options_.delivery_timeout));
  const uint32_t n = d.manifest.token_count;
  if (d.manifest.namespace_key != r.namespace_key || n >= r.tokens.size() ||
      d.manifest.state_key !=
          kvstate::MakeStateKey(r.namespace_key, std::span(r.tokens.data(), n))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delivery ", r.delivery_id, " summarises ", n,
        " tokens that are not a proper prefix of this conversation under its namespace"));
  }
  if (d.delta) return ApplyDeltaTo(r, d, hot, s);
  RETURN_IF_ERROR(
      kvstate::LoadPages(d.manifest, d.pages, kvstate::LoadTiers::kRetained, &s->session->cache()));
  RETURN_IF_ERROR(s->session->Resume(static_cast<int32_t>(n)));
  s->tokens.assign(r.tokens.begin(), r.tokens.begin() + n);
  return absl::OkStatus();
}

std::optional<HotSession> TurnRunner::LoadDelivery(const TurnRequest& r,
                                                   std::optional<HotSession>& hot,
                                                   TurnStart* start) {
  const auto t0 = Clock::now();
  HotSession s = EmptySession(model_, pool_, SessionOptions(r), r.namespace_key);
  if (absl::Status st = LoadDeliveryInto(r, hot, &s); !st.ok()) {
    log::Warning("prefill delivery unusable; starting without it",
                 {{"session", r.session_id}, {"error", st.ToString()}});
    return std::nullopt;
  }
  start->source = Source::kPrefillWorker;
  start->load_seconds = SecondsSince(t0);
  return s;
}

HotSession TurnRunner::StartState(const TurnRequest& r, std::optional<HotSession> hot,
                                  TurnStart* start, std::vector<model::KvHead>* cold) {
  if (r.delivery_id != 0) {
    if (std::optional<HotSession> delivered = LoadDelivery(r, hot, start)) {
      return std::move(*delivered);
    }
  }
  const bool extends = hot && hot->namespace_key == r.namespace_key &&
                       hot->tokens.size() < r.tokens.size() &&
                       std::equal(hot->tokens.begin(), hot->tokens.end(), r.tokens.begin());
  if (extends) {
    start->source = Source::kHot;
    return std::move(*hot);
  }
  if (std::optional<HotSession> warm = LoadWarm(r, start, cold)) return std::move(*warm);
  start->source = Source::kRecompute;
  return EmptySession(model_, pool_, SessionOptions(r), r.namespace_key);
}

model::SessionOptions TurnRunner::SessionOptions(const TurnRequest& r) const {
  return worker::SessionOptionsFor(options_.kv_pool, r.policy.codec, options_.prefill_chunk_tokens);
}

bool TurnRunner::Recalls(const eviction::Scorer* scorer) const {
  return cache_ != nullptr && worker::Recalls(scorer, options_.limits);
}

std::vector<model::KvHead> TurnRunner::ColdEntries(const TurnRequest& r, const HotSession& s,
                                                   std::vector<model::KvHead> newest,
                                                   TurnStart* start) {
  if (s.tokens.empty()) return {};
  const auto t0 = Clock::now();
  std::vector<model::KvHead> cold =
      worker::GatherColdEntries(*cache_, model_, r.namespace_key, s.tokens, s.session->cache(),
                                r.session_id, std::move(newest));
  start->load_seconds += SecondsSince(t0);
  return cold;
}

absl::StatusOr<TurnResult> TurnRunner::Run(const TurnRequest& r, const TurnCallbacks& callbacks) {
  const auto t0 = r.received;
  if (r.tokens.empty()) return absl::InvalidArgumentError("tokens must not be empty");
  if (r.max_tokens < 1 || r.max_tokens > options_.max_output_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.max_tokens must be in [1, ",
                                                   options_.max_output_tokens, "], got ",
                                                   r.max_tokens));
  }
  RETURN_IF_ERROR(worker::ValidateConversation(model_, r.tokens));
  ASSIGN_OR_RETURN(model::Sampler sampler, model::Sampler::Create(r.sampling));
  ASSIGN_OR_RETURN(model::StopStrings stops, model::StopStrings::Create(r.stop));
  worker::Method method;  // none: keep everything
  if (!r.policy.method.empty()) {
    ASSIGN_OR_RETURN(method, scorers_.For(r.policy));
  }
  // Decode-time eviction, checked before anything runs; what it evicts joins the turn's cold tier
  // (`tiers`, stored with the state).
  worker::TierScores tiers;
  std::unique_ptr<eviction::DecodeEviction> decode_eviction;
  if (r.policy.decode_budget_tokens > 0) {
    eviction::DecodeEvictionOptions o = eviction::DecodeEvictionFor(
        *method.settings, r.policy.decode_budget_tokens, r.policy.decode_interval);
    o.on_evicted = [&tiers](eviction::EvictionResult&& e) {
      worker::AddEviction(tiers, std::move(e));
    };
    ASSIGN_OR_RETURN(decode_eviction,
                     eviction::DecodeEviction::Create(model_, *method.scorer, std::move(o)));
  }

  ASSIGN_OR_RETURN(std::optional<HotSession> checked_out,
                   hot_.Checkout(r.session_id, options_.session_wait));
  TurnResult result;
  std::vector<model::KvHead> newest_cold;  // a warm start's evicted entries, fetched with it
  HotSession s = StartState(r, std::move(checked_out), &result.start,
                            Recalls(method.scorer) ? &newest_cold : nullptr);
  model::Session& session = *s.session;
  result.start.reused_tokens = static_cast<int32_t>(s.tokens.size());
  std::span<const int32_t> fresh(r.tokens.data() + s.tokens.size(),
                                 r.tokens.size() - s.tokens.size());
  result.start.prefilled_tokens = static_cast<int32_t>(fresh.size());

  // A prefill worker's delivery is evicted already (and recalled); the rest (the last token) is
  // only fed.
  const bool delivered = result.start.source == Source::kPrefillWorker;
  if (delivered) method = worker::Method{};
  const std::vector<model::KvHead> cold =
      Recalls(method.scorer) ? ColdEntries(r, s, std::move(newest_cold), &result.start)
                             : std::vector<model::KvHead>();
  // Room for this turn's entries: idle hot copies (stored already) go, least recently used first.
  if (options_.kv_pool != nullptr) {
    hot_.MakeRoom(
        *options_.kv_pool,
        TurnBytes(session.cache(), static_cast<int64_t>(fresh.size()) + r.max_tokens,
                  static_cast<int64_t>(fresh.size()),
                  decode_eviction ? r.policy.decode_budget_tokens + r.policy.decode_interval
                                  : std::numeric_limits<int64_t>::max()));
  }
  const auto t_prefill = Clock::now();
  absl::StatusOr<worker::PolicyPrefill> prefill = absl::UnknownError("the prefill did not run");
  // The prefill starts when the pool has room for its entries (all of them before eviction).
  const absl::Status ran = engine_.Run(
      [&] {
        prefill = worker::PrefillTurn(session, fresh, method, r.policy, options_.limits, cold);
        return absl::OkStatus();
      },
      options_.kv_pool != nullptr ? TurnBytes(session.cache(), static_cast<int64_t>(fresh.size()))
                                  : 0);
  if (!ran.ok()) prefill = ran;
  if (!prefill.ok()) {
    // A failed prefill may have reset the session (pipeline.h); nothing of it stays hot.
    hot_.Abandon(r.session_id);
    return prefill.status();
  }
  s.tokens.assign(r.tokens.begin(), r.tokens.end());
  result.start.prefill_seconds = SecondsSince(t_prefill);
  result.start.total_entries = prefill->total_entries;
  result.start.kept_entries = session.cache().TotalEntries();
  result.start.recall_candidates = prefill->recall_candidates;
  result.start.recalled_entries = prefill->recalled;
  result.start.ttft_seconds = SecondsSince(t0);  // refined when the first token streams
  if (callbacks.started) callbacks.started(result.start);

  // Decode, streaming each token with the text it completes, up to a stop string.
  model::TextStream text(model_.tokenizer());
  bool first = true;
  int32_t streamed = 0;  // tokens the callback saw (the engine may have sampled past a stop)
  auto on_token = [&](int32_t token) {
    ++streamed;
    absl::StatusOr<std::string> piece = text.Push(token);
    model::StopStrings::Step shown = stops.Push(piece.ok() ? *piece : std::string());
    if (first) {
      result.start.ttft_seconds = SecondsSince(t0);
      first = false;
    }
    const int32_t ids[] = {token};
    const bool more = callbacks.tokens ? callbacks.tokens(ids, shown.text) : true;
    return more && !shown.stopped;
  };
  // With a cache node, a decode the full pool preempts waits there (worker::CacheParking).
  std::optional<worker::CacheParking> parking;
  if (cache_ != nullptr && options_.kv_pool != nullptr) {
    parking.emplace(*cache_, model_, session, s.tokens, r.session_id, options_.page_tokens);
  }
  tiers = std::move(prefill->tiers);
  absl::StatusOr<model::GenerationResult> gen =
      engine_.Decode(session, sampler, std::move(prefill->logits), r.max_tokens, on_token,
                     parking ? parking->Hooks() : worker::Parking{}, decode_eviction.get());
  if (!gen.ok()) {
    hot_.Abandon(r.session_id);
    return gen.status();
  }
  if (!stops.stopped()) {
    absl::StatusOr<std::string> rest = text.Finish();
    model::StopStrings::Step last = stops.Push(rest.ok() ? *rest : std::string());
    if (!last.stopped) last.text += stops.Finish();
    if (!last.text.empty() && callbacks.tokens) callbacks.tokens({}, last.text);
  }
  result.stop = stops.stopped() ? model::StopReason::kEndOfGeneration : gen->stop;
  result.generated_tokens = stops.stopped() ? streamed : static_cast<int32_t>(gen->tokens.size());
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
  if (decode_eviction) result.decode_evicted_entries = decode_eviction->stats().evicted_entries;
  Store(r, s, std::move(tiers), &result);
  hot_.Return(r.session_id, std::move(s));
  return result;
}

// Writes the turn's state to the cache node; a failure leaves the session hot only (logged).
void TurnRunner::Store(const TurnRequest& r, const HotSession& s, worker::TierScores tiers,
                       TurnResult* result) {
  if (cache_ == nullptr) return;
  absl::StatusOr<kvstate::EncodedState> encoded =
      worker::EncodeSessionState(model_, s.session->cache(), std::move(tiers), s.namespace_key,
                                 s.tokens, r.policy.codec, options_.page_tokens);
  absl::Status stored = encoded.status();
  if (encoded.ok()) stored = worker::StoreState(*cache_, *encoded, s.tokens, r.session_id);
  if (!stored.ok()) {
    log::Error("storing the session state failed; it stays hot only",
               {{"session", r.session_id}, {"error", stored.ToString()}});
    return;
  }
  result->state_key = encoded->manifest.state_key;
  result->state_bytes = encoded->bytes.size();
  result->retained_bytes = worker::RetainedBytes(encoded->manifest);
}

}  // namespace glimpse::decode_worker
