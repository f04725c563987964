#include "prefill-worker/prefill_worker_grpc.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/common/grpc/identity.h"
#include "core/common/grpc/status.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/worker/grpc/request_checks.h"
#include "proto/limits.h"

namespace glimpse::prefill_worker {
namespace {

void ToProto(const worker::PrefillOutcome& o, v1::PrefillResponse* r) {
  r->set_source(o.warm ? v1::STATE_SOURCE_WARM : v1::STATE_SOURCE_RECOMPUTE);
  r->set_reused_tokens(o.reused_tokens);
  r->set_prefilled_tokens(o.prefilled_tokens);
  r->set_delivered_tokens(o.delivered_tokens);
  r->set_kept_entries(o.kept_entries);
  r->set_total_entries(o.total_entries);
  r->set_load_seconds(o.load_seconds);
  r->set_prefill_seconds(o.prefill_seconds);
  r->set_ship_seconds(o.ship_seconds);
  r->set_shipped_bytes(o.shipped_bytes);
  r->set_stored_bytes(o.stored_bytes);
  r->set_recall_candidates(o.recall_candidates);
  r->set_recalled_entries(o.recalled_entries);
  r->set_delta(o.delta);
}

}  // namespace

absl::StatusOr<worker::PrefillJob> FromProto(const v1::PrefillRequest& request) {
  worker::PrefillJob job;
  RETURN_IF_ERROR(v1::CheckId("session_id", request.session_id()));
  job.session_id = request.session_id();
  ASSIGN_OR_RETURN(job.namespace_key, worker::NamespaceFromBytes(request.namespace_key()));
  job.tokens.assign(request.tokens().begin(), request.tokens().end());
  ASSIGN_OR_RETURN(job.policy, worker::PolicyFromProto(request.policy()));
  job.decode_address = request.decode_ucx_address();
  job.delivery_id = request.delivery_id();
  if (request.hot_tokens() < 0 || request.hot_tokens() >= request.tokens_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hot_tokens must be in [0, ", request.tokens_size(), "), got ", request.hot_tokens()));
  }
  job.hot_tokens = request.hot_tokens();
  return job;
}

PrefillWorkerGrpc::PrefillWorkerGrpc(worker::TurnRunner& runner, metrics::MetricsRegistry& registry)
    : runner_(runner),
      registry_(registry),
      seconds_(registry.AddHistogram("glimpse_prefill_worker_prefill_seconds",
                                     "Whole prefills: queue, load, prefill, store and ship.",
                                     metrics::LatencyBuckets())),
      prefilled_(registry.AddCounter("glimpse_prefill_worker_prefilled_tokens_total",
                                     "Tokens run through the model.")),
      shipped_(registry.AddCounter("glimpse_prefill_worker_shipped_bytes_total",
                                   "Delivery bytes shipped to decode workers.")),
      stored_(registry.AddCounter("glimpse_prefill_worker_stored_bytes_total",
                                  "Page bytes (kept and evicted) written to cache nodes.")) {
  registry.AddCollector([this](metrics::SampleWriter& w) {
    w.Gauge("glimpse_prefill_worker_queue_length", "Prefills running or waiting.", {},
            static_cast<double>(queued_.load()));
    worker::AddEngineMetrics(runner_.engine_stats(), "glimpse_prefill_worker", w);
    worker::AddTurnMetrics(runner_.stats(), "glimpse_prefill_worker", w);
  });
}

grpc::Status PrefillWorkerGrpc::Fail(const absl::Status& status) {
  registry_
      .AddCounter("glimpse_prefill_worker_errors_total", "Failed calls by status code.",
                  {{"code", std::string(absl::StatusCodeToString(status.code()))}})
      .Increment();
  return ToGrpcStatus(status);
}

grpc::Status PrefillWorkerGrpc::Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* request,
                                        v1::PrefillResponse* response) {
  GRPC_RETURN_IF_ERROR(Authorize(*ctx, "Prefill", {roles::kFrontend}));
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<worker::PrefillJob> job = FromProto(*request);
  if (!job.ok()) return Fail(job.status());
  queued_.fetch_add(1);
  const absl::StatusOr<worker::PrefillOutcome> out =
      runner_.Prefill(*job);  // jobs take turns inside
  queued_.fetch_sub(1);
  if (!out.ok()) return Fail(out.status());
  ToProto(*out, response);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  seconds_.Observe(seconds);
  prefilled_.Increment(out->prefilled_tokens);
  shipped_.Increment(static_cast<double>(out->shipped_bytes));
  stored_.Increment(static_cast<double>(out->stored_bytes));
  const std::string source = out->warm ? "warm" : "recompute";
  registry_
      .AddCounter("glimpse_prefill_worker_prefills_total", "Prefills by where they started.",
                  {{"source", source}})
      .Increment();
  log::Info("prefill done", {{"session", job->session_id},
                             {"source", source},
                             {"reused", static_cast<long long>(out->reused_tokens)},
                             {"prefilled", static_cast<long long>(out->prefilled_tokens)},
                             {"kept_entries", static_cast<long long>(out->kept_entries)},
                             {"shipped_bytes", static_cast<long long>(out->shipped_bytes)},
                             {"seconds", seconds}});
  return grpc::Status::OK;
}

}  // namespace glimpse::prefill_worker
