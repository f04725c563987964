#include "core/worker/turn_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/eviction/decode_eviction.h"
#include "core/model/stop_strings.h"
#include "core/model/text_stream.h"
#include "core/worker/cache_parking.h"
#include "core/worker/prefill_delta.h"

namespace glimpse::worker {
namespace {

using Clock = std::chrono::steady_clock;

HotSession EmptySession(const model::Model& model, kernels::ThreadPool& pool,
                        const model::SequenceOptions& options, const kvstate::NamespaceKey& ns) {
  HotSession s;
  s.session = std::make_unique<model::Sequence>(model, pool, options);
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

std::string_view TurnStateName(TurnState s) {
  switch (s) {
    case TurnState::kWaiting:
      return "waiting";
    case TurnState::kLoading:
      return "loading";
    case TurnState::kPrefilling:
      return "prefilling";
    case TurnState::kDecoding:
      return "decoding";
    case TurnState::kPreempted:
      return "preempted";
    case TurnState::kStoring:
      return "storing";
    case TurnState::kShipping:
      return "shipping";
  }
  return "unknown";
}

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

// A turn's state in the runner's counts, from waiting until it returns (done).
class TurnRunner::Tracker {
 public:
  explicit Tracker(TurnRunner& runner) : runner_(runner) {
    absl::MutexLock lock(&runner_.stats_mu_);
    ++runner_.stats_.in_state[Index(state_)];
  }
  ~Tracker() {
    absl::MutexLock lock(&runner_.stats_mu_);
    --runner_.stats_.in_state[Index(state_)];
    ++runner_.stats_.done;
  }
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  void Enter(TurnState s) {
    absl::MutexLock lock(&runner_.stats_mu_);
    --runner_.stats_.in_state[Index(state_)];
    ++runner_.stats_.in_state[Index(s)];
    state_ = s;
  }
  // `hooks` that also move the turn to preempted and back.
  Parking Tracked(Parking hooks) {
    return {.park =
                [this, park = std::move(hooks.park)](std::span<const int32_t> generated) {
                  absl::Status st = park(generated);
                  if (st.ok()) Enter(TurnState::kPreempted);
                  return st;
                },
            .unpark =
                [this, unpark = std::move(hooks.unpark)] {
                  absl::Status st = unpark();
                  if (st.ok()) Enter(TurnState::kDecoding);
                  return st;
                }};
  }

 private:
  static size_t Index(TurnState s) { return static_cast<size_t>(s); }
  TurnRunner& runner_;
  TurnState state_ ABSL_GUARDED_BY(runner_.stats_mu_) = TurnState::kWaiting;
};

TurnRunner::TurnRunner(const model::Model& model, kernels::ThreadPool& pool, TurnParts parts,
                       TurnRunnerOptions options)
    : model_(model),
      pool_(pool),
      parts_(parts),
      options_(std::move(options)),
      scorers_(options_.lookahead_module, options_.profile),
      engine_(model, pool,
              {.make_room =
                   [this](int64_t bytes) {
                     // Idle hot copies are stored already: they go first.
                     if (parts_.hot != nullptr && options_.kv_pool != nullptr) {
                       parts_.hot->MakeRoom(*options_.kv_pool, bytes);
                     }
                   },
               .kv_pool = options_.kv_pool}) {
  if (parts_.ship != nullptr) peers_.emplace(*parts_.ship);
}

TurnStats TurnRunner::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

// ---------------------------------------------------------------------------------------------
// A decode worker's turn.

absl::StatusOr<TurnResult> TurnRunner::Decode(const TurnRequest& r,
                                              const TurnCallbacks& callbacks) {
  const auto t0 = r.received;
  if (parts_.hot == nullptr) {
    return absl::FailedPreconditionError("this worker holds no hot sessions: it runs no decodes");
  }
  HotSessions& hot = *parts_.hot;
  if (r.tokens.empty()) return absl::InvalidArgumentError("tokens must not be empty");
  if (r.max_tokens < 1 || r.max_tokens > options_.max_output_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.max_tokens must be in [1, ",
                                                   options_.max_output_tokens, "], got ",
                                                   r.max_tokens));
  }
  RETURN_IF_ERROR(ValidateConversation(model_, r.tokens));
  ASSIGN_OR_RETURN(model::Sampler sampler, model::Sampler::Create(r.sampling));
  ASSIGN_OR_RETURN(model::StopStrings stops, model::StopStrings::Create(r.stop));
  Method method;  // none: keep everything
  if (!r.policy.method.empty()) {
    ASSIGN_OR_RETURN(method, scorers_.For(r.policy));
  }
  // Decode-time eviction, checked before anything runs; what it evicts joins the turn's cold tier
  // (`tiers`, stored with the state).
  TierScores tiers;
  std::unique_ptr<eviction::DecodeEviction> decode_eviction;
  if (r.policy.decode_budget_tokens > 0) {
    eviction::DecodeEvictionOptions o = eviction::DecodeEvictionFor(
        *method.settings, r.policy.decode_budget_tokens, r.policy.decode_interval);
    o.on_evicted = [&tiers](eviction::EvictionResult&& e) { AddEviction(tiers, std::move(e)); };
    ASSIGN_OR_RETURN(decode_eviction,
                     eviction::DecodeEviction::Create(model_, *method.scorer, std::move(o)));
  }

  // Waiting: for the session's previous turn.
  Tracker turn(*this);
  ASSIGN_OR_RETURN(std::optional<HotSession> checked_out,
                   hot.Checkout(r.session_id, options_.session_wait));

  // Loading: the start state (step 1), and the history's cold tier when the turn recalls.
  turn.Enter(TurnState::kLoading);
  TurnResult result;
  std::vector<model::KvHead> newest_cold;  // a warm start's evicted entries, fetched with it
  HotSession s = StartState(r, std::move(checked_out), &result.start,
                            Recalls(method.scorer) ? &newest_cold : nullptr);
  model::Sequence& session = *s.session;
  result.start.reused_tokens = static_cast<int32_t>(s.tokens.size());
  std::span<const int32_t> fresh(r.tokens.data() + s.tokens.size(),
                                 r.tokens.size() - s.tokens.size());
  result.start.prefilled_tokens = static_cast<int32_t>(fresh.size());
  // A prefill worker's delivery is evicted already (and recalled); the rest (the last token) is
  // only fed.
  if (result.start.source == Source::kPrefillWorker) method = Method{};
  const std::vector<model::KvHead> cold =
      Recalls(method.scorer) ? ColdEntries(r.namespace_key, s.tokens, session, r.session_id,
                                           std::move(newest_cold), &result.start.load_seconds)
                             : std::vector<model::KvHead>();
  // Room for this turn's entries: idle hot copies (stored already) go, least recently used first.
  if (options_.kv_pool != nullptr) {
    hot.MakeRoom(
        *options_.kv_pool,
        TurnBytes(session.cache(), static_cast<int64_t>(fresh.size()) + r.max_tokens,
                  static_cast<int64_t>(fresh.size()),
                  decode_eviction ? r.policy.decode_budget_tokens + r.policy.decode_interval
                                  : std::numeric_limits<int64_t>::max()));
  }

  // Prefilling (step 2): at the engine, once the pool has room for the entries (all of them,
  // before eviction).
  turn.Enter(TurnState::kPrefilling);
  const auto t_prefill = Clock::now();
  absl::StatusOr<PolicyPrefill> prefill = absl::UnknownError("the prefill did not run");
  const absl::Status ran = engine_.Run(
      [&] {
        prefill = PrefillTurn(session, fresh, method, r.policy, options_.limits, cold);
        return absl::OkStatus();
      },
      options_.kv_pool != nullptr ? TurnBytes(session.cache(), static_cast<int64_t>(fresh.size()))
                                  : 0);
  if (!ran.ok()) prefill = ran;
  if (!prefill.ok()) {
    // A failed prefill may have reset the session (pipeline.h); nothing of it stays hot.
    hot.Abandon(r.session_id);
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

  // Decoding (step 3), in the engine's shared steps, streaming each token with the text it
  // completes, up to a stop string.
  turn.Enter(TurnState::kDecoding);
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
  // With a cache node, a decode the full pool preempts waits there (preempted).
  std::optional<CacheParking> parking;
  if (parts_.cache != nullptr && options_.kv_pool != nullptr) {
    parking.emplace(*parts_.cache, model_, session, s.tokens, r.session_id, options_.page_tokens);
  }
  tiers = std::move(prefill->tiers);
  absl::StatusOr<model::GenerationResult> gen =
      engine_.Decode(session, sampler, std::move(prefill->logits), r.max_tokens, on_token,
                     parking ? turn.Tracked(parking->Hooks()) : Parking{}, decode_eviction.get());
  if (!gen.ok()) {
    hot.Abandon(r.session_id);
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

  // Storing (step 4), then the session stays hot.
  turn.Enter(TurnState::kStoring);
  Store(r, s, std::move(tiers), &result);
  hot.Return(r.session_id, std::move(s));
  return result;
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
  return EmptySession(model_, pool_, SessionOptions(r.policy), r.namespace_key);
}

std::optional<HotSession> TurnRunner::LoadWarm(const TurnRequest& r, TurnStart* start,
                                               std::vector<model::KvHead>* cold) {
  if (parts_.cache == nullptr) return std::nullopt;
  // The last token must be prefilled for its logits: look up at most n − 1 tokens.
  std::span<const int32_t> prefix(r.tokens.data(), r.tokens.size() - 1);
  std::optional<StoredPrefix> stored =
      LoadStoredPrefix(*parts_.cache, model_, pool_, SessionOptions(r.policy), r.namespace_key,
                       prefix, r.session_id, cold != nullptr);
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

std::optional<HotSession> TurnRunner::LoadDelivery(const TurnRequest& r,
                                                   std::optional<HotSession>& hot,
                                                   TurnStart* start) {
  const auto t0 = Clock::now();
  HotSession s = EmptySession(model_, pool_, SessionOptions(r.policy), r.namespace_key);
  if (absl::Status st = LoadDeliveryInto(r, hot, &s); !st.ok()) {
    log::Warning("prefill delivery unusable; starting without it",
                 {{"session", r.session_id}, {"error", st.ToString()}});
    return std::nullopt;
  }
  start->source = Source::kPrefillWorker;
  start->load_seconds = SecondsSince(t0);
  return s;
}

absl::Status TurnRunner::LoadDeliveryInto(const TurnRequest& r, std::optional<HotSession>& hot,
                                          HotSession* s) {
  if (parts_.inbox == nullptr) {
    return absl::FailedPreconditionError("this worker has no prefill delivery inbox");
  }
  ASSIGN_OR_RETURN(Delivery d,
                   parts_.inbox->Take(r.delivery_id, absl::Now() + options_.delivery_timeout));
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

absl::Status TurnRunner::ApplyDeltaTo(const TurnRequest& r, const Delivery& d,
                                      std::optional<HotSession>& hot, HotSession* s) {
  if (!hot || hot->namespace_key != r.namespace_key ||
      kvstate::MakeStateKey(r.namespace_key, hot->tokens) != d.delta->base_key) {
    return absl::FailedPreconditionError(absl::StrCat(
        "delivery ", r.delivery_id, " is a delta against a hot copy this worker does not hold"));
  }
  RETURN_IF_ERROR(ApplyDelta(*d.delta, d.manifest, d.pages, hot->session->cache()));
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

void TurnRunner::Store(const TurnRequest& r, const HotSession& s, TierScores tiers,
                       TurnResult* result) {
  if (parts_.cache == nullptr) return;
  absl::StatusOr<kvstate::EncodedState> encoded =
      EncodeSessionState(model_, s.session->cache(), std::move(tiers), s.namespace_key, s.tokens,
                         r.policy.codec, options_.page_tokens);
  absl::Status stored = encoded.status();
  // A cache node that restarts is back within seconds: wait for it rather than leave the turn
  // stored nowhere.
  const absl::Time give_up = absl::Now() + options_.store_retry;
  for (absl::Duration backoff = absl::Milliseconds(100); encoded.ok();
       backoff = std::min(2 * backoff, absl::Seconds(1))) {
    stored = StoreState(*parts_.cache, *encoded, s.tokens, r.session_id);
    if (stored.ok() || !absl::IsUnavailable(stored) || absl::Now() + backoff > give_up) break;
    absl::SleepFor(backoff);
  }
  if (!stored.ok()) {
    log::Error("storing the session state failed; it stays hot only",
               {{"session", r.session_id}, {"error", stored.ToString()}});
    return;
  }
  result->state_key = encoded->manifest.state_key;
  result->state_bytes = encoded->bytes.size();
  result->retained_bytes = RetainedBytes(encoded->manifest);
}

// ---------------------------------------------------------------------------------------------
// A prefill worker's job.

absl::StatusOr<PrefillOutcome> TurnRunner::Prefill(const PrefillJob& job) {
  RETURN_IF_ERROR(CheckJob(job));
  Method method;  // none: keep everything
  if (!job.policy.method.empty()) {
    ASSIGN_OR_RETURN(method, scorers_.For(job.policy));
  }
  Tracker turn(*this);

  // Loading (step 1): the stored state to start from; with the session hot on the decode worker,
  // the state it holds (stored at the end of its last turn), so that only a delta ships.
  turn.Enter(TurnState::kLoading);
  PrefillOutcome out;
  const std::span<const int32_t> prefix(job.tokens.data(), job.tokens.size() - 1);
  const bool recalls = Recalls(method.scorer);
  std::unique_ptr<model::Sequence> session;
  std::vector<model::KvHead> newest_cold;  // the stored state's evicted entries, fetched with it
  if (parts_.cache != nullptr) {
    const std::span<const int32_t> start =
        job.hot_tokens > 0 ? prefix.first(job.hot_tokens) : prefix;
    if (std::optional<StoredPrefix> stored =
            LoadStoredPrefix(*parts_.cache, model_, pool_, SessionOptions(job.policy),
                             job.namespace_key, start, job.session_id, recalls)) {
      session = std::move(stored->session);
      newest_cold = std::move(stored->cold);
      out.warm = true;
      out.reused_tokens = stored->token_count;
      out.load_seconds = stored->load_seconds;
    }
  }
  if (session == nullptr) {
    session = std::make_unique<model::Sequence>(model_, pool_, SessionOptions(job.policy));
  }
  // The decode worker holds exactly the state this prefill starts from: ship a delta against it.
  std::optional<std::vector<std::vector<int32_t>>> base;
  if (job.hot_tokens > 0 && out.reused_tokens == job.hot_tokens) {
    base = HeadPositions(session->cache());
  }
  const std::span<const int32_t> fresh = prefix.subspan(out.reused_tokens);
  std::vector<model::KvHead> cold;  // the history's cold tier, for recall
  if (recalls && !fresh.empty()) {
    cold = ColdEntries(job.namespace_key, prefix.first(out.reused_tokens), *session, job.session_id,
                       std::move(newest_cold), &out.load_seconds);
  }

  // Prefilling (step 2): at the engine, chunk by chunk with the other jobs, once the pool has
  // room for the entries.
  turn.Enter(TurnState::kPrefilling);
  const auto t_prefill = Clock::now();
  PolicyPrefill prefill;  // nothing to prefill when the whole prefix was stored
  prefill.total_entries = session->cache().TotalEntries();
  if (!fresh.empty()) {
    absl::StatusOr<PolicyPrefill> ran = absl::UnknownError("the prefill did not run");
    RETURN_IF_ERROR(engine_.Run(
        [&] {
          ran = PrefillWithPolicy(*session, fresh, method, job.policy, options_.limits, cold);
          return absl::OkStatus();
        },
        options_.kv_pool != nullptr ? TurnBytes(session->cache(), fresh.size()) : 0));
    ASSIGN_OR_RETURN(prefill, std::move(ran));
  }
  out.prefilled_tokens = static_cast<int32_t>(fresh.size());
  out.delivered_tokens = static_cast<int32_t>(prefix.size());
  out.total_entries = prefill.total_entries;
  out.kept_entries = session->cache().TotalEntries();
  out.recall_candidates = prefill.recall_candidates;
  out.recalled_entries = prefill.recalled;
  out.prefill_seconds = SecondsSince(t_prefill);

  // Storing (step 3): both tiers; a failure still ships.
  turn.Enter(TurnState::kStoring);
  const auto t_ship = Clock::now();
  ASSIGN_OR_RETURN(
      kvstate::EncodedState state,
      EncodeSessionState(model_, session->cache(), std::move(prefill.tiers), job.namespace_key,
                         prefix, job.policy.codec, options_.page_tokens));
  if (parts_.cache != nullptr) {
    if (absl::Status st = StoreState(*parts_.cache, state, prefix, job.session_id); st.ok()) {
      out.stored_bytes = state.bytes.size();
    } else {
      log::Error("storing the prefilled state failed; shipping it anyway",
                 {{"session", job.session_id}, {"error", st.ToString()}});
    }
  }

  // Shipping (step 4): the kept pages, or the delta against the decode worker's hot copy.
  turn.Enter(TurnState::kShipping);
  ASSIGN_OR_RETURN(const OutgoingDelivery delivery,
                   MakeJobDelivery(job, state, session->cache(), base ? &*base : nullptr));
  out.delta = base.has_value();
  RETURN_IF_ERROR(Ship(job, delivery, &out));
  out.ship_seconds = SecondsSince(t_ship);
  return out;
}

absl::Status TurnRunner::CheckJob(const PrefillJob& job) const {
  if (parts_.ship == nullptr) {
    return absl::FailedPreconditionError("this worker has no transport to ship deliveries on");
  }
  if (job.tokens.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens: a prefill needs at least 2 (the decode worker prefills the last), got ",
        job.tokens.size()));
  }
  if (job.decode_address.empty()) {
    return absl::InvalidArgumentError("decode_ucx_address must name the decode worker");
  }
  if (job.delivery_id == 0) return absl::InvalidArgumentError("delivery_id must be nonzero");
  return ValidateConversation(model_, job.tokens);
}

absl::StatusOr<OutgoingDelivery> TurnRunner::MakeJobDelivery(
    const PrefillJob& job, const kvstate::EncodedState& state, const model::KvCache& cache,
    const std::vector<std::vector<int32_t>>* base) const {
  if (base == nullptr) return MakeDelivery(job.delivery_id, state);
  const std::span<const int32_t> tokens(job.tokens.data(), job.tokens.size() - 1);
  ASSIGN_OR_RETURN(
      const Delta delta,
      MakeDelta(*base, kvstate::MakeStateKey(job.namespace_key, tokens.first(job.hot_tokens)),
                cache));
  ASSIGN_OR_RETURN(const kvstate::EncodedState added,
                   EncodeSessionState(model_, delta.added, {}, job.namespace_key, tokens,
                                      job.policy.codec, options_.page_tokens));
  return MakeDelivery(job.delivery_id, added, EncodeDeltaBase(delta.base));
}

absl::Status TurnRunner::Ship(const PrefillJob& job, const OutgoingDelivery& delivery,
                              PrefillOutcome* out) {
  const std::vector<std::span<const uint8_t>> buffers = delivery.buffers();
  auto failed = [&](const absl::Status& st) {
    peers_->Forget(job.decode_address);
    return absl::Status(st.code(),
                        absl::StrCat("shipping delivery ", job.delivery_id, " (", delivery.bytes(),
                                     " bytes) to the decode worker: ", st.message()));
  };
  absl::StatusOr<transport::PeerId> peer = peers_->Get(job.decode_address);
  if (!peer.ok()) return failed(peer.status());
  const absl::Time deadline = absl::Now() + options_.ship_timeout;
  // No batch CRC32C: the decode worker checks the manifest's, the delta's and every page's.
  absl::StatusOr<transport::TransferId> id =
      parts_.ship->Submit(*peer, buffers, {.deadline = deadline, .checksum = false});
  if (!id.ok()) return failed(id.status());
  if (absl::Status st = parts_.ship->Wait(*id, deadline); !st.ok()) return failed(st);
  out->shipped_bytes = delivery.bytes();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// What both kinds of turn share.

model::SequenceOptions TurnRunner::SessionOptions(const Policy& policy) const {
  return SessionOptionsFor(options_.kv_pool, policy.codec, options_.prefill_chunk_tokens);
}

bool TurnRunner::Recalls(const eviction::Scorer* scorer) const {
  return parts_.cache != nullptr && worker::Recalls(scorer, options_.limits);
}

std::vector<model::KvHead> TurnRunner::ColdEntries(const kvstate::NamespaceKey& ns,
                                                   std::span<const int32_t> history,
                                                   const model::Sequence& session,
                                                   std::string_view session_id,
                                                   std::vector<model::KvHead> newest,
                                                   double* load_seconds) {
  if (history.empty()) return {};
  const auto t0 = Clock::now();
  std::vector<model::KvHead> cold = GatherColdEntries(
      *parts_.cache, model_, ns, history, session.cache(), session_id, std::move(newest));
  *load_seconds += SecondsSince(t0);
  return cold;
}

void AddTurnMetrics(const TurnStats& s, std::string_view prefix, metrics::SampleWriter& w) {
  const std::string p(prefix);
  for (int i = 0; i < kTurnStates; ++i) {
    w.Gauge(p + "_turns_in_state",
            "Turns now in each state: waiting, loading, prefilling, decoding, preempted, storing, "
            "shipping.",
            {{"state", std::string(TurnStateName(static_cast<TurnState>(i)))}},
            static_cast<double>(s.in_state[i]));
  }
  w.Counter(p + "_turns_done_total", "Turns that ended, well or not.", {},
            static_cast<double>(s.done));
}

}  // namespace glimpse::worker
