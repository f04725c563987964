#include "frontend/frontend_metrics.h"

#include <algorithm>
#include <string>

#include "frontend/turn_request.h"
#include "proto/names.h"

namespace glimpse::frontend {
FrontendMetrics::FrontendMetrics(metrics::MetricsRegistry& r)
    : registry_(r),
      ttft_(r.AddHistogram("glimpse_frontend_ttft_seconds",
                           "Generate: request received to first token sent.",
                           metrics::LatencyBuckets())),
      turn_seconds_(r.AddHistogram("glimpse_frontend_turn_seconds",
                                   "Generate: request received to lease sent.",
                                   metrics::LatencyBuckets())),
      tokens_(r.AddCounter("glimpse_frontend_tokens_streamed_total", "Token ids streamed.")),
      text_bytes_(
          r.AddCounter("glimpse_frontend_text_bytes_streamed_total", "UTF-8 text bytes streamed.")),
      reused_tokens_(r.AddCounter("glimpse_frontend_reused_tokens_total",
                                  "Prefix tokens whose KV came from a hot copy or a cache node.")),
      prefilled_tokens_(r.AddCounter("glimpse_frontend_prefilled_tokens_total",
                                     "Tokens prefilled by decode workers.")),
      recall_candidates_(r.AddCounter("glimpse_frontend_recall_candidates_total",
                                      "Cold KV entries offered back to turns by recall.")),
      recalled_entries_(r.AddCounter("glimpse_frontend_recalled_entries_total",
                                     "Cold KV entries recall put back into turns' hot KV.")),
      state_bytes_(r.AddCounter("glimpse_frontend_state_bytes_total",
                                "Encoded KV state bytes written to cache nodes at turn end.")),
      full_fp16_bytes_(r.AddCounter("glimpse_frontend_full_fp16_bytes_total",
                                    "What those states would be as unevicted fp16 KV.")),
      worker_failures_(r.AddCounter("glimpse_frontend_worker_failures_total",
                                    "Turns a decode worker failed mid-turn.")),
      prefill_failures_(r.AddCounter("glimpse_frontend_prefill_failures_total",
                                     "Prefills a prefill worker failed (the decode worker "
                                     "prefilled instead).")),
      in_flight_(r.AddGauge("glimpse_frontend_turns_in_flight", "Generate calls running.")) {}

void FrontendMetrics::Request(std::string_view method, absl::StatusCode code) {
  registry_
      .AddCounter("glimpse_frontend_requests_total", "Calls by method and final status code.",
                  {{"method", std::string(method)}, {"code", absl::StatusCodeToString(code)}})
      .Increment();
}

void FrontendMetrics::TurnStarted(const v1::TurnStarted& started) {
  registry_
      .AddCounter("glimpse_frontend_turns_total", "Turns by where the session's KV came from.",
                  {{"source", v1::StateSourceName(started.source())}})
      .Increment();
  reused_tokens_.Increment(std::max(0, started.reused_tokens()));
  prefilled_tokens_.Increment(std::max(0, started.prefilled_tokens()));
  recall_candidates_.Increment(
      static_cast<double>(std::max<int64_t>(0, started.recall_candidates())));
  recalled_entries_.Increment(
      static_cast<double>(std::max<int64_t>(0, started.recalled_entries())));
}

void FrontendMetrics::Streamed(const v1::TokenChunk& chunk) {
  tokens_.Increment(chunk.token_ids_size());
  text_bytes_.Increment(static_cast<double>(chunk.text().size()));
}

void FrontendMetrics::TurnDone(const v1::TurnDone& done, double seconds_since_request) {
  state_bytes_.Increment(static_cast<double>(done.state_bytes()));
  full_fp16_bytes_.Increment(static_cast<double>(done.full_fp16_bytes()));
  turn_seconds_.Observe(seconds_since_request);
}

}  // namespace glimpse::frontend
