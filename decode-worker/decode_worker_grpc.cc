#include "decode-worker/decode_worker_grpc.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/status.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/model/stop_strings.h"
#include "core/worker/grpc/request_checks.h"
#include "proto/limits.h"

namespace glimpse::decode_worker {
namespace {

absl::StatusOr<model::SamplingOptions> SamplingFromProto(const v1::SamplingParams& p) {
  if (!(p.temperature() >= 0.0f && p.temperature() <= 100.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature must be in [0, 100], got ", p.temperature()));
  }
  if (p.top_k() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.top_k must be >= 0, got ", p.top_k()));
  }
  if (!(p.top_p() >= 0.0f && p.top_p() <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p must be in [0, 1], got ", p.top_p()));
  }
  model::SamplingOptions o;
  o.temperature = p.temperature();
  o.top_k = p.top_k();
  o.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  o.seed = p.seed();
  return o;
}

v1::StateSource SourceToProto(worker::Source s) {
  switch (s) {
    case worker::Source::kHot:
      return v1::STATE_SOURCE_HOT;
    case worker::Source::kWarm:
      return v1::STATE_SOURCE_WARM;
    case worker::Source::kRecompute:
      return v1::STATE_SOURCE_RECOMPUTE;
    case worker::Source::kPrefillWorker:
      return v1::STATE_SOURCE_PREFILL_WORKER;
  }
  return v1::STATE_SOURCE_UNSPECIFIED;
}

v1::DecodeEvent StartedEvent(const worker::TurnStart& s) {
  v1::DecodeEvent e;
  v1::TurnStarted* t = e.mutable_started();
  t->set_source(SourceToProto(s.source));
  t->set_reused_tokens(s.reused_tokens);
  t->set_prefilled_tokens(s.prefilled_tokens);
  t->set_kept_entries(s.kept_entries);
  t->set_recall_candidates(s.recall_candidates);
  t->set_recalled_entries(s.recalled_entries);
  t->set_total_entries(s.total_entries);
  t->set_load_seconds(s.load_seconds);
  t->set_prefill_seconds(s.prefill_seconds);
  return e;
}

v1::DecodeEvent DoneEvent(const worker::TurnResult& r) {
  v1::DecodeEvent e;
  v1::TurnDone* d = e.mutable_done();
  d->set_finish_reason(r.stop == model::StopReason::kEndOfGeneration ? "stop"
                       : r.stop == model::StopReason::kCancelled     ? "cancelled"
                                                                     : "length");
  d->set_generated_tokens(r.generated_tokens);
  d->set_kv_tokens(r.kv_tokens);
  d->set_kv_entries(r.kv_entries);
  d->set_state_bytes(r.state_bytes);
  d->set_full_fp16_bytes(r.full_fp16_bytes);
  d->set_ttft_seconds(r.start.ttft_seconds);
  d->set_decode_tokens_per_second(r.decode_tokens_per_second);
  d->set_hot_tokens(r.hot_tokens);
  d->set_retained_bytes(r.retained_bytes);
  d->set_decode_evicted_entries(r.decode_evicted_entries);
  return e;
}

}  // namespace

absl::StatusOr<worker::TurnRequest> FromProto(const v1::DecodeTurnRequest& request) {
  worker::TurnRequest r;
  RETURN_IF_ERROR(v1::CheckId("session_id", request.session_id()));
  r.session_id = request.session_id();
  ASSIGN_OR_RETURN(r.namespace_key, worker::NamespaceFromBytes(request.namespace_key()));
  if (request.tokens().empty()) return absl::InvalidArgumentError("tokens must not be empty");
  r.tokens.assign(request.tokens().begin(), request.tokens().end());
  ASSIGN_OR_RETURN(r.sampling, SamplingFromProto(request.sampling()));
  r.max_tokens = request.sampling().max_tokens();
  r.stop.assign(request.sampling().stop().begin(), request.sampling().stop().end());
  RETURN_IF_ERROR(model::ValidateStopStrings(r.stop, "sampling.stop"));
  ASSIGN_OR_RETURN(r.policy, worker::PolicyFromProto(request.policy()));
  r.delivery_id = request.delivery_id();
  return r;
}

DecodeWorkerGrpc::DecodeWorkerGrpc(worker::TurnRunner& runner, worker::HotSessions& hot,
                                   metrics::MetricsRegistry& registry)
    : runner_(runner),
      hot_(hot),
      registry_(registry),
      ttft_(registry.AddHistogram("glimpse_decode_worker_ttft_seconds",
                                  "Request received to first token.", metrics::LatencyBuckets())),
      turn_seconds_(registry.AddHistogram("glimpse_decode_worker_turn_seconds",
                                          "Whole turns, including the state write.",
                                          metrics::LatencyBuckets())),
      generated_(
          registry.AddCounter("glimpse_decode_worker_generated_tokens_total", "Tokens generated.")),
      state_bytes_(registry.AddCounter("glimpse_decode_worker_state_bytes_total",
                                       "Encoded page bytes written to cache nodes.")),
      full_bytes_(registry.AddCounter("glimpse_decode_worker_full_fp16_bytes_total",
                                      "What the same states would take as unevicted fp16 KV.")) {
  registry.AddCollector([&hot, &runner](metrics::SampleWriter& w) {
    const worker::HotStats s = hot.Stats();
    w.Gauge("glimpse_decode_worker_hot_sessions", "Sessions whose KV is held here.", {},
            static_cast<double>(s.sessions));
    w.Gauge("glimpse_decode_worker_hot_bytes", "KV bytes of the hot sessions.", {},
            static_cast<double>(s.bytes));
    w.Counter("glimpse_decode_worker_hot_dropped_for_room_total",
              "Idle hot sessions dropped to make KV pool room for a turn (they stay stored).", {},
              static_cast<double>(s.dropped_for_room));
    w.Counter("glimpse_decode_worker_hot_reencoded_for_room_total",
              "Idle hot sessions re-encoded into a smaller format to make KV pool room.", {},
              static_cast<double>(s.reencoded_for_room));
    worker::AddEngineMetrics(runner.engine_stats(), "glimpse_decode_worker", w);
    worker::AddTurnMetrics(runner.stats(), "glimpse_decode_worker", w);
  });
}

grpc::Status DecodeWorkerGrpc::Fail(const absl::Status& status) {
  registry_
      .AddCounter("glimpse_decode_worker_errors_total", "Failed calls by status code.",
                  {{"code", std::string(absl::StatusCodeToString(status.code()))}})
      .Increment();
  return ToGrpcStatus(status);
}

grpc::Status DecodeWorkerGrpc::DecodeTurn(grpc::ServerContext* context,
                                          const v1::DecodeTurnRequest* request,
                                          grpc::ServerWriter<v1::DecodeEvent>* writer) {
  GRPC_RETURN_IF_ERROR(Authorize(*context, "DecodeTurn", {roles::kFrontend}));
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<worker::TurnRequest> turn = FromProto(*request);
  if (!turn.ok()) return Fail(turn.status());
  turn->received = t0;
  worker::TurnCallbacks callbacks;
  callbacks.started = [&](const worker::TurnStart& s) { writer->Write(StartedEvent(s)); };
  callbacks.tokens = [&](std::span<const int32_t> ids, const std::string& text) {
    v1::DecodeEvent e;
    v1::TokenChunk* chunk = e.mutable_tokens();
    for (int32_t id : ids) chunk->add_token_ids(id);
    chunk->set_text(text);
    return writer->Write(e) && !context->IsCancelled();
  };
  absl::StatusOr<worker::TurnResult> result = runner_.Decode(*turn, callbacks);
  if (!result.ok()) return Fail(result.status());
  writer->Write(DoneEvent(*result));
  registry_
      .AddCounter("glimpse_decode_worker_turns_total", "Turns by where the KV came from.",
                  {{"source", std::string(worker::SourceName(result->start.source))}})
      .Increment();
  ttft_.Observe(result->start.ttft_seconds);
  turn_seconds_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  generated_.Increment(result->generated_tokens);
  state_bytes_.Increment(static_cast<double>(result->state_bytes));
  full_bytes_.Increment(static_cast<double>(result->full_fp16_bytes));
  log::Info("turn done", {{"session", turn->session_id},
                          {"source", std::string(worker::SourceName(result->start.source))},
                          {"reused", static_cast<long long>(result->start.reused_tokens)},
                          {"prefilled", static_cast<long long>(result->start.prefilled_tokens)},
                          {"generated", static_cast<long long>(result->generated_tokens)},
                          {"kv_entries", static_cast<long long>(result->kv_entries)},
                          {"state_bytes", static_cast<long long>(result->state_bytes)}});
  return grpc::Status::OK;
}

grpc::Status DecodeWorkerGrpc::ReleaseSession(grpc::ServerContext* ctx,
                                              const v1::ReleaseSessionRequest* request,
                                              v1::ReleaseSessionResponse* response) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "ReleaseSession", {roles::kFrontend, roles::kAdmin}));
  const int64_t freed = hot_.Release(request->session_id());
  response->set_released(freed > 0);
  response->set_freed_bytes(freed);
  return grpc::Status::OK;
}

}  // namespace glimpse::decode_worker
