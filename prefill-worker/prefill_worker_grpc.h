// The gRPC face of a prefill worker (proto/glimpse/v1/prefill_worker.proto): validates requests
// and runs prefill jobs on the worker::TurnRunner (core/worker/turn_runner.h: the whole flow),
// many at once (their prefills share the model through the engine).
// Metrics: glimpse_prefill_worker_{prefills_total{source},errors_total{code},prefill_seconds,
// prefilled_tokens_total,shipped_bytes_total,stored_bytes_total,queue_length,engine_*,
// turns_in_state{state},turns_done_total} (worker::AddEngineMetrics, worker::AddTurnMetrics).
#pragma once

#include <atomic>
#include <mutex>

#include "core/common/metrics.h"
#include "core/worker/turn_runner.h"
#include "glimpse/v1/prefill_worker.grpc.pb.h"

namespace glimpse::prefill_worker {

// The wire request as a worker::PrefillJob; InvalidArgument naming the field.
absl::StatusOr<worker::PrefillJob> FromProto(const v1::PrefillRequest& request);

class PrefillWorkerGrpc final : public v1::PrefillWorker::Service {
 public:
  PrefillWorkerGrpc(worker::TurnRunner& runner, metrics::MetricsRegistry& registry);

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       v1::PrefillResponse* response) override;

  // Prefills running or waiting: the load a heartbeat reports.
  int64_t queue_length() const { return queued_.load(); }

 private:
  grpc::Status Fail(const absl::Status& status);

  worker::TurnRunner& runner_;
  metrics::MetricsRegistry& registry_;
  metrics::Histogram& seconds_;
  metrics::Counter& prefilled_;
  metrics::Counter& shipped_;
  metrics::Counter& stored_;
  std::atomic<int64_t> queued_{0};
};

}  // namespace glimpse::prefill_worker
