// An agent-trace simulator for the coordinator: sessions of several turns separated by tool
// calls, a small cluster of decode and prefill workers, service times from our own measured
// figures (coordinator_figures.json), and a discrete-event loop that drives the real
// CoordinatorService (FakeClock, in-memory store) for admission, routing and leases.
//
// Model (stated, not measured): a prefill worker serves one prefill at a time, FIFO, at the
// measured prefill rate; a decode worker serves every admitted turn at the measured single-stream
// decode rate (its memory, the coordinator's budget, is what limits concurrency); short prompts
// prefilled on the decode worker run at the prefill rate without queueing. A turn that finds no
// room waits in a FIFO admission queue (as RouteTurn's own queue does); a hot turn skips it.
// Reload of a session that is not hot: `kTransfer` ships its kept KV from a cache node at the
// measured rate of a cold cache-node get (RocksDB read + UCX transfer to the worker); `kRecompute`
// prefills the whole history again on a prefill worker (no cache node: Continuum's setting).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace glimpse::coordinator::sim {

struct Figures {
  double prefill_tps = 0;
  double decode_tps = 0;
  double reload_bytes_per_s = 0;
  double kv_bytes_per_token = 0;
};
absl::StatusOr<Figures> LoadFigures(const std::string& path);

struct ToolSpec {
  std::string name;
  double weight;
  double median_s;  // lognormal: exp(mu) = median
  double sigma;
};

struct WorkloadOptions {
  int sessions = 300;
  double arrival_rate = 0.1;  // sessions per second (Poisson)
  int min_turns = 3, max_turns = 10;
  int first_min = 300, first_max = 900;  // new tokens of the first turn
  int next_min = 30, next_max = 300;     // new tokens of later turns (the tool's result)
  int out_min = 20, out_max = 120;       // generated tokens per turn
  int max_output = 128;                  // reserved per turn
  std::vector<ToolSpec> tools = {{"read_file", 0.40, 1.0, 0.5},
                                 {"grep", 0.25, 2.5, 0.6},
                                 {"web_search", 0.15, 6.0, 0.7},
                                 {"run_tests", 0.20, 30.0, 0.5}};
  uint64_t seed = 1;
};

struct TurnSpec {
  int new_tokens;
  int out_tokens;
  std::string tool;  // called after this turn; "" after the last
  double tool_s;
};
struct SessionSpec {
  std::string id;
  double arrival_s;
  std::vector<TurnSpec> turns;
};
std::vector<SessionSpec> MakeWorkload(const WorkloadOptions& options);

enum class ReloadMode { kTransfer, kRecompute };

struct ClusterOptions {
  int decode_workers = 2;
  int64_t decode_capacity_bytes = int64_t{256} << 20;
  int prefill_workers = 2;
  int64_t prefill_on_decode_tokens = 128;
  ReloadMode reload = ReloadMode::kTransfer;
  bool demote_under_pressure = true;
};

struct Policy {
  std::string name;
  std::optional<absl::Duration> fixed_ttl;  // nullopt: the estimator
  bool pressure_pin_cost = false;           // the estimator with PinCost::kPressure
  int min_samples = 100;                    // the estimator's lease.min_samples
};

struct Result {
  std::string policy;
  int sessions_done = 0, sessions_refused = 0;
  double jct_mean_s = 0, jct_p50_s = 0, jct_p99_s = 0;
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p99_s = 0;
  double hot_rate = 0;           // turns after the first that were hot hits
  double queue_wait_mean_s = 0;  // admission wait per turn
  double prefill_busy = 0;       // mean prefill-worker utilisation
  int64_t demoted_pressure = 0, demoted_expired = 0;
  double makespan_s = 0;
};

absl::StatusOr<Result> Simulate(const std::vector<SessionSpec>& workload,
                                const ClusterOptions& cluster, const Figures& figures,
                                const Policy& policy);

// What no lease policy can beat on this workload and cluster: every later turn hot, on decode
// workers with memory to spare (no lease ends, no admission wait, no reload).
absl::StatusOr<Result> SimulateAllHot(const std::vector<SessionSpec>& workload,
                                      const ClusterOptions& cluster, const Figures& figures);

}  // namespace glimpse::coordinator::sim
