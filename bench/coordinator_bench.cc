// Coordinator benchmark (make bench-coordinator):
//   1. the agent-trace simulator (coordinator_sim.h) for two reload modes, comparing job
//      completion time and TTFT of evict-at-turn-end, fixed TTLs and the estimator;
//   2. RouteTurn/EndTurn ops/s and latency under 32 concurrent gRPC clients against a real
//      in-process server (GrpcServer + CoordinatorGrpc + RocksStateStore).
// Flags: --sessions=N (500) --rate=R (sessions/s, 0.1) --seed=S (1) --seeds=K (3: seeds S..S+K-1,
// full tables for S, ratios for the others) --decode_workers=2 --decode_mib=128
// --prefill_workers=2 --no_demote --min_samples=100 (the estimator's) --grpc_seconds=T (10)
// --clients=C (32) --figures=FILE
// --quick (100 sessions, one seed, 2 s of gRPC load).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/coordinator_sim.h"
#include "coordinator/coordinator_grpc.h"
#include "coordinator/rocks_state_store.h"
#include "core/common/grpc/server.h"

namespace glimpse::coordinator {
namespace {

struct Flags {
  int sessions = 500;
  double rate = 0.1;
  uint64_t seed = 1;
  int seeds = 3;
  double grpc_seconds = 10;
  int clients = 32;
  int decode_mib = 128;
  int decode_workers = 2;
  int prefill_workers = 2;
  bool no_demote = false;
  int min_samples = 100;
  std::string figures = GLIMPSE_BENCH_DIR "/coordinator_figures.json";
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name, std::string* out) {
      std::string prefix = std::string("--") + name + "=";
      if (a.rfind(prefix, 0) != 0) return false;
      *out = a.substr(prefix.size());
      return true;
    };
    std::string v;
    if (a == "--quick") {
      f->sessions = 100;
      f->seeds = 1;
      f->grpc_seconds = 2;
    } else if (value("sessions", &v)) {
      if (!absl::SimpleAtoi(v, &f->sessions) || f->sessions < 1) return false;
    } else if (value("rate", &v)) {
      if (!absl::SimpleAtod(v, &f->rate) || f->rate <= 0) return false;
    } else if (value("seed", &v)) {
      if (!absl::SimpleAtoi(v, &f->seed)) return false;
    } else if (value("seeds", &v)) {
      if (!absl::SimpleAtoi(v, &f->seeds) || f->seeds < 1) return false;
    } else if (value("grpc_seconds", &v)) {
      if (!absl::SimpleAtod(v, &f->grpc_seconds) || f->grpc_seconds < 0) return false;
    } else if (value("clients", &v)) {
      if (!absl::SimpleAtoi(v, &f->clients) || f->clients < 1) return false;
    } else if (value("decode_mib", &v)) {
      if (!absl::SimpleAtoi(v, &f->decode_mib) || f->decode_mib < 1) return false;
    } else if (value("decode_workers", &v)) {
      if (!absl::SimpleAtoi(v, &f->decode_workers) || f->decode_workers < 1) return false;
    } else if (value("prefill_workers", &v)) {
      if (!absl::SimpleAtoi(v, &f->prefill_workers) || f->prefill_workers < 1) return false;
    } else if (value("min_samples", &v)) {
      if (!absl::SimpleAtoi(v, &f->min_samples) || f->min_samples < 1) return false;
    } else if (a == "--no_demote") {
      f->no_demote = true;
    } else if (value("figures", &v)) {
      f->figures = v;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

std::vector<sim::Policy> Policies(const Flags& flags) {
  std::vector<sim::Policy> p = {{"evict (tau=0)", absl::ZeroDuration()}};
  for (int s : {1, 2, 5, 10, 30, 60})
    p.push_back({absl::StrFormat("ttl %ds", s), absl::Seconds(s)});
  p.push_back({"estimator (c=1)", std::nullopt, false, flags.min_samples});
  p.push_back({"estimator (c=pressure)", std::nullopt, true, flags.min_samples});
  return p;
}

sim::ClusterOptions Cluster(const Flags& flags, sim::ReloadMode mode) {
  sim::ClusterOptions cluster;
  cluster.reload = mode;
  cluster.decode_capacity_bytes = int64_t{flags.decode_mib} << 20;
  cluster.decode_workers = flags.decode_workers;
  cluster.prefill_workers = flags.prefill_workers;
  cluster.demote_under_pressure = !flags.no_demote;
  return cluster;
}

const char* ModeName(sim::ReloadMode mode) {
  return mode == sim::ReloadMode::kTransfer ? "transfer" : "recompute";
}

// Every policy on one workload; progress on stderr.
absl::StatusOr<std::vector<sim::Result>> RunPolicies(const Flags& flags,
                                                     const std::vector<sim::SessionSpec>& workload,
                                                     const sim::ClusterOptions& cluster,
                                                     const sim::Figures& fig, uint64_t seed) {
  std::vector<sim::Result> results;
  for (const sim::Policy& p : Policies(flags)) {
    absl::Time t0 = absl::Now();
    absl::StatusOr<sim::Result> r = sim::Simulate(workload, cluster, fig, p);
    if (!r.ok()) return r.status();
    std::fprintf(stderr, "  seed %llu, %s, %s: %.2f s\n", static_cast<unsigned long long>(seed),
                 ModeName(cluster.reload), p.name.c_str(), absl::ToDoubleSeconds(absl::Now() - t0));
    results.push_back(*r);
  }
  return results;
}

void PrintTable(const std::vector<sim::Result>& results) {
  std::printf(
      "| policy | JCT mean s | JCT p50 | JCT p99 | TTFT mean s | TTFT p50 | TTFT p99 | hot "
      "| admission wait s | prefill busy | demoted (pressure/expired) | refused |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const sim::Result& r : results) {
    std::printf(
        "| %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.0f%% | %.3f | %.0f%% | %lld/%lld | %d "
        "|\n",
        r.policy.c_str(), r.jct_mean_s, r.jct_p50_s, r.jct_p99_s, r.ttft_mean_s, r.ttft_p50_s,
        r.ttft_p99_s, 100 * r.hot_rate, r.queue_wait_mean_s, 100 * r.prefill_busy,
        static_cast<long long>(r.demoted_pressure), static_cast<long long>(r.demoted_expired),
        r.sessions_refused);
  }
}

// JCT ratios of the two estimator rows (the last two) against evict and the best fixed TTL.
void PrintRatios(const std::vector<sim::Result>& results, const std::string& prefix) {
  const sim::Result& evict = results.front();
  const sim::Result* best = &results[1];
  for (size_t i = 1; i + 2 < results.size(); ++i) {
    if (results[i].jct_mean_s < best->jct_mean_s) best = &results[i];
  }
  for (size_t i = results.size() - 2; i < results.size(); ++i) {
    const sim::Result& est = results[i];
    std::printf(
        "%s%s: JCT %.3fx vs evict-at-turn-end (goal >= 1.1x), %.3fx vs the best fixed TTL "
        "(%s; goal >= 1.0x); TTFT %.2fx vs evict\n",
        prefix.c_str(), est.policy.c_str(), evict.jct_mean_s / est.jct_mean_s,
        best->jct_mean_s / est.jct_mean_s, best->policy.c_str(),
        evict.ttft_mean_s / est.ttft_mean_s);
  }
}

int RunSimulations(const Flags& flags) {
  absl::StatusOr<sim::Figures> fig = sim::LoadFigures(flags.figures);
  if (!fig.ok()) {
    std::fprintf(stderr, "%s\n", std::string(fig.status().message()).c_str());
    return 1;
  }
  std::printf(
      "figures (%s): prefill %.0f tok/s, decode %.0f tok/s, reload (cache node get) %.2f GB/s, "
      "%.0f KV bytes/token\n",
      flags.figures.c_str(), fig->prefill_tps, fig->decode_tps, fig->reload_bytes_per_s / 1e9,
      fig->kv_bytes_per_token);
  sim::WorkloadOptions w;
  w.sessions = flags.sessions;
  w.arrival_rate = flags.rate;
  std::printf("workload: %d sessions, Poisson %.3f/s, %d-%d turns, tools:", w.sessions,
              w.arrival_rate, w.min_turns, w.max_turns);
  for (const sim::ToolSpec& t : w.tools) {
    std::printf(" %s (%.0f%%, lognormal median %.1fs sigma %.1f)", t.name.c_str(), 100 * t.weight,
                t.median_s, t.sigma);
  }
  std::printf(
      "\ncluster: %d decode workers x %d MiB, %d prefill workers, prefill on decode <= 128 "
      "new tokens, demotion under pressure %s\n",
      flags.decode_workers, flags.decode_mib, flags.prefill_workers,
      flags.no_demote ? "off" : "on");
  const std::pair<const char*, sim::ReloadMode> modes[] = {
      {"transfer: reload = kept KV from a cache node at its measured get rate",
       sim::ReloadMode::kTransfer},
      {"recompute: reload = prefill the history again (no cache node)",
       sim::ReloadMode::kRecompute}};
  std::vector<std::string> summary;
  for (int k = 0; k < flags.seeds; ++k) {
    w.seed = flags.seed + k;
    std::vector<sim::SessionSpec> workload = sim::MakeWorkload(w);
    for (const auto& [title, mode] : modes) {
      absl::StatusOr<std::vector<sim::Result>> results =
          RunPolicies(flags, workload, Cluster(flags, mode), *fig, w.seed);
      if (!results.ok()) {
        std::fprintf(stderr, "simulation failed: %s\n",
                     std::string(results.status().message()).c_str());
        return 1;
      }
      if (k == 0) {
        std::printf("\n%s (seed %llu)\n", title, static_cast<unsigned long long>(w.seed));
        PrintTable(*results);
        PrintRatios(*results, "");
      } else {
        PrintRatios(*results,
                    absl::StrFormat("seed %llu, %s, ", static_cast<unsigned long long>(w.seed),
                                    ModeName(mode)));
      }
    }
    if (k == 0 && flags.seeds > 1) std::printf("\nother seeds (same settings):\n");
  }
  return 0;
}

// --- gRPC load: 32 clients, each its own channel, RouteTurn + EndTurn (+ EndSession).

struct OpStats {
  std::vector<double> route_us, end_us;
  int64_t errors = 0;
  std::string first_error;
  void Error(const char* op, const grpc::Status& st) {
    if (errors++ == 0) first_error = absl::StrFormat("%s: %s", op, st.error_message());
  }
};

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int RunGrpcLoad(const Flags& flags) {
  if (flags.grpc_seconds <= 0) return 0;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("glimpse_coord_bench_" + std::to_string(::getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  auto store = RocksStateStore::Open({dir, false});
  if (!store.ok()) return 1;
  CoordinatorOptions o;
  auto svc = CoordinatorService::Create(o, Clock::Real(), store->get());
  if (!svc.ok()) return 1;
  for (int d = 0; d < 4; ++d) {
    (void)(*svc)->RegisterNode({absl::StrFormat("d%d", d), NodeRole::kDecode,
                                absl::StrFormat("127.0.0.1:%d", 7000 + d), "", int64_t{1} << 40,
                                ""});
  }
  (void)(*svc)->RegisterNode({"p0", NodeRole::kPrefill, "127.0.0.1:7100", "", 0, ""});
  CoordinatorGrpc adapter(svc->get());
  auto server = GrpcServer::Start({}, {&adapter});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::string address = absl::StrFormat("127.0.0.1:%d", (*server)->port());
  std::vector<OpStats> stats(flags.clients);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < flags.clients; ++c) {
    threads.emplace_back([&, c] {
      auto channel = ClientChannel(address);
      if (!channel.ok()) return;
      auto stub = v1::Coordinator::NewStub(*channel);
      OpStats& st = stats[c];
      for (int i = 0; !stop; ++i) {
        std::string session = absl::StrFormat("c%d-s%d", c, i / 8);
        v1::RouteTurnRequest rq;
        rq.set_session_id(session);
        rq.set_tenant("bench");
        rq.set_history_tokens((i % 8) * 300);
        rq.set_new_tokens(200);
        rq.set_max_output_tokens(100);
        rq.set_tool_name("grep");
        v1::RouteTurnResponse rr;
        grpc::ClientContext rc;
        absl::Time t0 = absl::Now();
        grpc::Status gs = stub->RouteTurn(&rc, rq, &rr);
        st.route_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        if (!gs.ok()) {
          st.Error("RouteTurn", gs);
          continue;
        }
        v1::EndTurnRequest eq;
        eq.set_session_id(session);
        eq.set_kv_tokens((i % 8) * 300 + 300);
        eq.set_tool_name(i % 8 == 7 ? "" : "grep");
        v1::EndTurnResponse er;
        grpc::ClientContext ec;
        t0 = absl::Now();
        gs = stub->EndTurn(&ec, eq, &er);
        st.end_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        if (!gs.ok()) st.Error("EndTurn", gs);
        if (i % 8 == 7) {
          v1::EndSessionRequest sq;
          sq.set_session_id(session);
          v1::EndSessionResponse sr;
          grpc::ClientContext sc;
          if (grpc::Status es = stub->EndSession(&sc, sq, &sr); !es.ok())
            st.Error("EndSession", es);
        }
      }
    });
  }
  // The workers' heartbeats (in process: the load is on the client calls).
  threads.emplace_back([&] {
    while (!stop) {
      for (const char* node : {"d0", "d1", "d2", "d3", "p0"}) (void)(*svc)->Heartbeat(node, {});
      absl::SleepFor(absl::Milliseconds(200));
    }
  });
  std::fprintf(stderr, "gRPC load: %d clients for %.0f s ...\n", flags.clients, flags.grpc_seconds);
  absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(flags.grpc_seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  OpStats all;
  for (OpStats& s : stats) {
    all.route_us.insert(all.route_us.end(), s.route_us.begin(), s.route_us.end());
    all.end_us.insert(all.end_us.end(), s.end_us.begin(), s.end_us.end());
    all.errors += s.errors;
    if (all.first_error.empty()) all.first_error = s.first_error;
  }
  double ops = static_cast<double>(all.route_us.size() + all.end_us.size());
  std::printf(
      "\ngRPC load: %d concurrent clients (one channel each), real in-process server, "
      "RocksDB state store (no fsync), %.1f s\n",
      flags.clients, seconds);
  std::printf("| op | ops/s | p50 us | p99 us |\n|---|---:|---:|---:|\n");
  std::printf("| RouteTurn | %.0f | %.0f | %.0f |\n", all.route_us.size() / seconds,
              Pct(all.route_us, 0.5), Pct(all.route_us, 0.99));
  std::printf("| EndTurn (lease) | %.0f | %.0f | %.0f |\n", all.end_us.size() / seconds,
              Pct(all.end_us, 0.5), Pct(all.end_us, 0.99));
  std::printf("| both | %.0f | | |\nerrors: %lld %s\n", ops / seconds,
              static_cast<long long>(all.errors), all.first_error.c_str());
  (*server)->Shutdown(absl::Now() + absl::Seconds(1));
  svc->reset();
  store->reset();
  std::filesystem::remove_all(dir);
  return all.errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace glimpse::coordinator

int main(int argc, char** argv) {
  glimpse::coordinator::Flags flags;
  if (!glimpse::coordinator::ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: %s [--quick] [--sessions=N] [--rate=R] [--seed=S] [--seeds=K] "
                 "[--decode_workers=N] [--decode_mib=M] [--prefill_workers=N] [--no_demote] "
                 "[--grpc_seconds=T] [--clients=C] [--figures=FILE]\n",
                 argv[0]);
    return 2;
  }
  if (int rc = glimpse::coordinator::RunSimulations(flags); rc != 0) return rc;
  return glimpse::coordinator::RunGrpcLoad(flags);
}
