// The gRPC face of a decode worker (proto/glimpse/v1/decode_worker.proto): validates requests,
// runs turns on the worker::TurnRunner (core/worker/turn_runner.h: the whole flow), many at once
// (their decodes batched by its engine), and streams their events.
// A client that goes away stops the decode after the current token; the turn's state is still
// stored. Metrics: glimpse_decode_worker_{turns_total{source},errors_total{code},
// generated_tokens_total, ttft_seconds, turn_seconds, hot_sessions, hot_bytes,
// state_bytes_total, full_fp16_bytes_total, engine_*, turns_in_state{state}, turns_done_total}
// (worker::AddEngineMetrics, worker::AddTurnMetrics).
#pragma once

#include "core/common/metrics.h"
#include "core/worker/turn_runner.h"
#include "glimpse/v1/decode_worker.grpc.pb.h"

namespace glimpse::decode_worker {

// The wire request as a worker::TurnRequest; InvalidArgument naming the field.
absl::StatusOr<worker::TurnRequest> FromProto(const v1::DecodeTurnRequest& request);

class DecodeWorkerGrpc final : public v1::DecodeWorker::Service {
 public:
  // Neither is owned; both outlive the service. Metrics go to `registry`.
  DecodeWorkerGrpc(worker::TurnRunner& runner, worker::HotSessions& hot,
                   metrics::MetricsRegistry& registry);

  grpc::Status DecodeTurn(grpc::ServerContext* context, const v1::DecodeTurnRequest* request,
                          grpc::ServerWriter<v1::DecodeEvent>* writer) override;
  grpc::Status ReleaseSession(grpc::ServerContext* context,
                              const v1::ReleaseSessionRequest* request,
                              v1::ReleaseSessionResponse* response) override;

 private:
  grpc::Status Fail(const absl::Status& status);

  worker::TurnRunner& runner_;
  worker::HotSessions& hot_;
  metrics::MetricsRegistry& registry_;
  metrics::Histogram& ttft_;
  metrics::Histogram& turn_seconds_;
  metrics::Counter& generated_;
  metrics::Counter& state_bytes_;
  metrics::Counter& full_bytes_;
};

}  // namespace glimpse::decode_worker
