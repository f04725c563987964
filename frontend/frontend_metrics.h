// Prometheus metrics of glimpse-frontend (docs/frontend.md):
//   glimpse_frontend_requests_total{method,code}   calls by method and final status code
//   glimpse_frontend_turns_total{source}           turns by where the KV came from (hot, warm,
//                                                  recompute, unspecified)
//   glimpse_frontend_ttft_seconds                  request received -> first token sent (histogram)
//   glimpse_frontend_turn_seconds                  request received -> lease sent (histogram)
//   glimpse_frontend_{tokens,text_bytes}_streamed_total, glimpse_frontend_reused_tokens_total,
//   glimpse_frontend_prefilled_tokens_total, glimpse_frontend_{state,full_fp16}_bytes_total,
//   glimpse_frontend_worker_failures_total, glimpse_frontend_turns_in_flight
// Thread-safe (the series are).
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "core/common/metrics.h"
#include "glimpse/v1/decode_worker.pb.h"

namespace glimpse::frontend {

class FrontendMetrics {
 public:
  // `registry` is not owned and must outlive this.
  explicit FrontendMetrics(metrics::MetricsRegistry& registry);

  void Request(std::string_view method, absl::StatusCode code);
  void TurnStarted(const v1::TurnStarted& started);
  void FirstToken(double seconds_since_request) { ttft_.Observe(seconds_since_request); }
  void Streamed(const v1::TokenChunk& chunk);
  void TurnDone(const v1::TurnDone& done, double seconds_since_request);
  void WorkerFailure() { worker_failures_.Increment(); }
  void PrefillFailure() { prefill_failures_.Increment(); }
  metrics::Gauge& in_flight() { return in_flight_; }

 private:
  metrics::MetricsRegistry& registry_;
  metrics::Histogram& ttft_;
  metrics::Histogram& turn_seconds_;
  metrics::Counter& tokens_;
  metrics::Counter& text_bytes_;
  metrics::Counter& reused_tokens_;
  metrics::Counter& prefilled_tokens_;
  metrics::Counter& recall_candidates_;
  metrics::Counter& recalled_entries_;
  metrics::Counter& state_bytes_;
  metrics::Counter& full_fp16_bytes_;
  metrics::Counter& worker_failures_;
  metrics::Counter& prefill_failures_;
  metrics::Gauge& in_flight_;
};

}  // namespace glimpse::frontend
