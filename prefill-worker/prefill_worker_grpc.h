// The gRPC face of a prefill worker (proto/glimpse/v1/prefill_worker.proto): validates requests
// and runs one prefill at a time on the Prefiller (one model, one thread pool); the others queue.
// Metrics: glimpse_prefill_worker_{prefills_total{source},errors_total{code},prefill_seconds,
// prefilled_tokens_total,shipped_bytes_total,stored_bytes_total,queue_length}.
#pragma once

#include <atomic>
#include <mutex>

#include "core/common/metrics.h"
#include "glimpse/v1/prefill_worker.grpc.pb.h"
#include "prefill-worker/prefiller.h"

namespace glimpse::prefill_worker {

// The wire request as a PrefillJob; InvalidArgument naming the field.
absl::StatusOr<PrefillJob> FromProto(const v1::PrefillRequest& request);

class PrefillWorkerGrpc final : public v1::PrefillWorker::Service {
 public:
  PrefillWorkerGrpc(Prefiller& prefiller, metrics::MetricsRegistry& registry);

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       v1::PrefillResponse* response) override;

  // Prefills running or waiting: the load a heartbeat reports.
  int64_t queue_length() const { return queued_.load(); }

 private:
  grpc::Status Fail(const absl::Status& status);

  Prefiller& prefiller_;
  metrics::MetricsRegistry& registry_;
  metrics::Histogram& seconds_;
  metrics::Counter& prefilled_;
  metrics::Counter& shipped_;
  metrics::Counter& stored_;
  std::atomic<int64_t> queued_{0};
};

}  // namespace glimpse::prefill_worker
