#include "prefill-worker/prefiller.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/model/forward_pass.h"
#include "core/worker/prefill_delivery.h"

namespace glimpse::prefill_worker {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Prefiller::Prefiller(const model::Model& model, kernels::ThreadPool& pool,
                     cache_client::CacheClient* cache, transport::Transport& ship,
                     PrefillerOptions options)
    : model_(model),
      pool_(pool),
      cache_(cache),
      ship_(ship),
      options_(std::move(options)),
      scorers_(options_.lookahead_module, options_.profile),
      peers_(ship) {}

absl::Status Prefiller::Check(const PrefillJob& job) const {
  if (job.tokens.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens: a prefill needs at least 2 (the decode worker prefills the last), got ",
        job.tokens.size()));
  }
  if (job.decode_address.empty()) {
    return absl::InvalidArgumentError("decode_ucx_address must name the decode worker");
  }
  if (job.delivery_id == 0) return absl::InvalidArgumentError("delivery_id must be nonzero");
  return worker::ValidateConversation(model_, job.tokens);
}

absl::StatusOr<PrefillOutcome> Prefiller::Run(const PrefillJob& job) {
  RETURN_IF_ERROR(Check(job));
  worker::Method method;  // none: keep everything
  if (!job.policy.method.empty()) {
    ASSIGN_OR_RETURN(method, scorers_.For(job.policy));
  }
  PrefillOutcome out;
  const std::span<const int32_t> prefix(job.tokens.data(), job.tokens.size() - 1);
  const bool recalls = cache_ != nullptr && worker::Recalls(method.scorer, options_.limits);
  const model::SessionOptions options =
      worker::SessionOptionsFor(options_.kv_pool, job.policy.codec, options_.prefill_chunk_tokens);
  std::unique_ptr<model::Session> session;
  std::vector<model::KvHead> newest_cold;  // the stored state's evicted entries, fetched with it
  if (cache_ != nullptr) {
    // With the session hot on the decode worker, start from the state it holds (stored at the end
    // of its last turn), so that only a delta ships.
    const std::span<const int32_t> start =
        job.hot_tokens > 0 ? prefix.first(job.hot_tokens) : prefix;
    if (std::optional<worker::StoredPrefix> stored = worker::LoadStoredPrefix(
            *cache_, model_, pool_, options, job.namespace_key, start, job.session_id, recalls)) {
      session = std::move(stored->session);
      newest_cold = std::move(stored->cold);
      out.warm = true;
      out.reused_tokens = stored->token_count;
      out.load_seconds = stored->load_seconds;
    }
  }
  if (session == nullptr) session = std::make_unique<model::Session>(model_, pool_, options);
  // The decode worker holds exactly the state this prefill starts from: ship a delta against it.
  std::optional<std::vector<std::vector<int32_t>>> base;
  if (job.hot_tokens > 0 && out.reused_tokens == job.hot_tokens) {
    base = worker::HeadPositions(session->cache());
  }
  const std::span<const int32_t> fresh = prefix.subspan(out.reused_tokens);
  std::vector<model::KvHead> cold;  // the history's cold tier, for recall
  if (recalls && out.reused_tokens > 0 && !fresh.empty()) {
    const auto t_cold = Clock::now();
    cold = worker::GatherColdEntries(*cache_, model_, job.namespace_key,
                                     prefix.first(out.reused_tokens), session->cache(),
                                     job.session_id, std::move(newest_cold));
    out.load_seconds += SecondsSince(t_cold);
  }

  const auto t_prefill = Clock::now();
  worker::PolicyPrefill prefill;  // nothing to prefill when the whole prefix was stored
  prefill.total_entries = session->cache().TotalEntries();
  if (!fresh.empty()) {
    worker::ComputeTurns::Turn turn(turns_);
    const model::ChunkHook others_go(
        [&turn](std::span<const model::BatchRows> chunk, const model::RunRows& run) {
          absl::StatusOr<model::PassOutputs> out = run(chunk);
          turn.Yield();
          return out;
        });
    ASSIGN_OR_RETURN(prefill, worker::PrefillWithPolicy(*session, fresh, method, job.policy,
                                                        options_.limits, cold));
  }
  out.prefilled_tokens = static_cast<int32_t>(fresh.size());
  out.delivered_tokens = static_cast<int32_t>(prefix.size());
  out.total_entries = prefill.total_entries;
  out.kept_entries = session->cache().TotalEntries();
  out.recall_candidates = prefill.recall_candidates;
  out.recalled_entries = prefill.recalled;
  out.prefill_seconds = SecondsSince(t_prefill);

  const auto t_ship = Clock::now();
  ASSIGN_OR_RETURN(kvstate::EncodedState state,
                   worker::EncodeSessionState(model_, session->cache(), std::move(prefill.tiers),
                                              job.namespace_key, prefix, job.policy.codec,
                                              options_.page_tokens));
  if (cache_ != nullptr) {
    if (absl::Status st = worker::StoreState(*cache_, state, prefix, job.session_id); st.ok()) {
      out.stored_bytes = state.bytes.size();
    } else {
      log::Error("storing the prefilled state failed; shipping it anyway",
                 {{"session", job.session_id}, {"error", st.ToString()}});
    }
  }
  ASSIGN_OR_RETURN(const worker::OutgoingDelivery delivery,
                   MakeDelivery(job, state, session->cache(), base ? &*base : nullptr));
  out.delta = base.has_value();
  RETURN_IF_ERROR(Ship(job, delivery, &out));
  out.ship_seconds = SecondsSince(t_ship);
  return out;
}

absl::StatusOr<worker::OutgoingDelivery> Prefiller::MakeDelivery(
    const PrefillJob& job, const kvstate::EncodedState& state, const model::KvCache& cache,
    const std::vector<std::vector<int32_t>>* base) const {
  if (base == nullptr) return worker::MakeDelivery(job.delivery_id, state);
  const std::span<const int32_t> tokens(job.tokens.data(), job.tokens.size() - 1);
  ASSIGN_OR_RETURN(
      const worker::Delta delta,
      worker::MakeDelta(
          *base, kvstate::MakeStateKey(job.namespace_key, tokens.first(job.hot_tokens)), cache));
  ASSIGN_OR_RETURN(const kvstate::EncodedState added,
                   worker::EncodeSessionState(model_, delta.added, {}, job.namespace_key, tokens,
                                              job.policy.codec, options_.page_tokens));
  return worker::MakeDelivery(job.delivery_id, added, worker::EncodeDeltaBase(delta.base));
}

absl::Status Prefiller::Ship(const PrefillJob& job, const worker::OutgoingDelivery& delivery,
                             PrefillOutcome* out) {
  const std::vector<std::span<const uint8_t>> buffers = delivery.buffers();
  auto failed = [&](const absl::Status& st) {
    peers_.Forget(job.decode_address);
    return absl::Status(st.code(),
                        absl::StrCat("shipping delivery ", job.delivery_id, " (", delivery.bytes(),
                                     " bytes) to the decode worker: ", st.message()));
  };
  absl::StatusOr<transport::PeerId> peer = peers_.Get(job.decode_address);
  if (!peer.ok()) return failed(peer.status());
  const absl::Time deadline = absl::Now() + options_.ship_timeout;
  // No batch CRC32C: the decode worker checks the manifest's, the delta's and every page's.
  absl::StatusOr<transport::TransferId> id =
      ship_.Submit(*peer, buffers, {.deadline = deadline, .checksum = false});
  if (!id.ok()) return failed(id.status());
  if (absl::Status st = ship_.Wait(*id, deadline); !st.ok()) return failed(st);
  out->shipped_bytes = delivery.bytes();
  return absl::OkStatus();
}

}  // namespace glimpse::prefill_worker
