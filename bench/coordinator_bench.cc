// Coordinator benchmark (make bench-coordinator):
//   1. the agent-trace simulator (coordinator_sim.h) for two reload modes, comparing job
//      completion time and TTFT of evict-at-turn-end, fixed TTLs and the estimator, beside the
//      all-hot bound no lease policy can beat, per seed and averaged over the seeds;
//   2. RouteTurn/EndTurn ops/s and latency under 32 concurrent gRPC clients against a real
//      in-process server (GrpcServer + CoordinatorGrpc + RocksStateStore, or with --etcd an
//      EtcdStateStore on a one-member etcd this benchmark starts on loopback).
// Flags: --sessions=N (500) --rate=R (sessions/s, 0.1) --seed=S (1) --seeds=K (3: seeds S..S+K-1,
// full tables for S, ratios for the others) --decode_workers=2 --decode_mib=128
// --prefill_workers=2 --no_demote --min_samples=100 (the estimator's) --ttls=1,2,5,10,30,60
// (the fixed TTLs, seconds) --grpc_seconds=T (10)
// --clients=C (32) --sync (the state store fsyncs before acknowledging: group commit)
// --etcd (the state in etcd instead of RocksDB)
// --figures=FILE
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
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/coordinator_sim.h"
#include "bench/flags.h"
#include "coordinator/coordinator_grpc.h"
#include "coordinator/etcd_state_store.h"
#include "coordinator/rocks_state_store.h"
#include "core/common/grpc/server.h"
#include "core/common/status_macros.h"
#include "core/etcd/etcd_process.h"

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
  bool sync = false;
  bool etcd = false;
  int min_samples = 100;
  std::vector<int> ttls_s = {1, 2, 5, 10, 30, 60};  // the fixed TTLs compared
  std::string figures = GLIMPSE_BENCH_DIR "/coordinator_figures.json";
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    if (a == "--sync") {
      f->sync = true;
    } else if (a == "--etcd") {
      f->etcd = true;
    } else if (a == "--quick") {
      f->sessions = 100;
      f->seeds = 1;
      f->grpc_seconds = 2;
    } else if (bench::FlagValue(a, "sessions", &v)) {
      if (!absl::SimpleAtoi(v, &f->sessions) || f->sessions < 1) return false;
    } else if (bench::FlagValue(a, "rate", &v)) {
      if (!absl::SimpleAtod(v, &f->rate) || f->rate <= 0) return false;
    } else if (bench::FlagValue(a, "seed", &v)) {
      if (!absl::SimpleAtoi(v, &f->seed)) return false;
    } else if (bench::FlagValue(a, "seeds", &v)) {
      if (!absl::SimpleAtoi(v, &f->seeds) || f->seeds < 1) return false;
    } else if (bench::FlagValue(a, "grpc_seconds", &v)) {
      if (!absl::SimpleAtod(v, &f->grpc_seconds) || f->grpc_seconds < 0) return false;
    } else if (bench::FlagValue(a, "clients", &v)) {
      if (!absl::SimpleAtoi(v, &f->clients) || f->clients < 1) return false;
    } else if (bench::FlagValue(a, "decode_mib", &v)) {
      if (!absl::SimpleAtoi(v, &f->decode_mib) || f->decode_mib < 1) return false;
    } else if (bench::FlagValue(a, "decode_workers", &v)) {
      if (!absl::SimpleAtoi(v, &f->decode_workers) || f->decode_workers < 1) return false;
    } else if (bench::FlagValue(a, "prefill_workers", &v)) {
      if (!absl::SimpleAtoi(v, &f->prefill_workers) || f->prefill_workers < 1) return false;
    } else if (bench::FlagValue(a, "min_samples", &v)) {
      if (!absl::SimpleAtoi(v, &f->min_samples) || f->min_samples < 1) return false;
    } else if (bench::FlagValue(a, "ttls", &v)) {
      f->ttls_s.clear();
      for (absl::string_view t : absl::StrSplit(v, ',')) {
        int ttl = 0;
        if (!absl::SimpleAtoi(t, &ttl) || ttl < 1) return false;
        f->ttls_s.push_back(ttl);
      }
    } else if (a == "--no_demote") {
      f->no_demote = true;
    } else if (bench::FlagValue(a, "figures", &v)) {
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
  for (int s : flags.ttls_s) p.push_back({absl::StrFormat("ttl %ds", s), absl::Seconds(s)});
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

// Every policy on one workload, then sim::SimulateAllHot: rows evict, the fixed TTLs,
// estimator (c=1), estimator (c=pressure), bound. Progress on stderr.
absl::StatusOr<std::vector<sim::Result>> RunPolicies(const Flags& flags,
                                                     const std::vector<sim::SessionSpec>& workload,
                                                     const sim::ClusterOptions& cluster,
                                                     const sim::Figures& fig, uint64_t seed) {
  std::vector<sim::Result> results;
  auto record = [&](absl::StatusOr<sim::Result> r, absl::Time t0) {
    if (!r.ok()) return r.status();
    std::fprintf(stderr, "  seed %llu, %s, %s: %.2f s\n", static_cast<unsigned long long>(seed),
                 ModeName(cluster.reload), r->policy.c_str(),
                 absl::ToDoubleSeconds(absl::Now() - t0));
    results.push_back(*std::move(r));
    return absl::OkStatus();
  };
  for (const sim::Policy& p : Policies(flags)) {
    absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(record(sim::Simulate(workload, cluster, fig, p), t0));
  }
  absl::Time t0 = absl::Now();
  RETURN_IF_ERROR(record(sim::SimulateAllHot(workload, cluster, fig), t0));
  return results;
}

// Row indices in RunPolicies' results.
struct Rows {
  size_t n;
  size_t FixedEnd() const { return n - 3; }  // fixed TTLs are rows 1 .. FixedEnd() - 1
  size_t Bound() const { return n - 1; }
  std::vector<size_t> Estimators() const { return {n - 3, n - 2}; }
  size_t BestFixed(const std::vector<double>& jct) const {
    size_t best = 1;
    for (size_t i = 1; i < FixedEnd(); ++i) {
      if (jct[i] < jct[best]) best = i;
    }
    return best;
  }
};

std::vector<double> JctMeans(const std::vector<sim::Result>& results) {
  std::vector<double> jct;
  for (const sim::Result& r : results) jct.push_back(r.jct_mean_s);
  return jct;
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

// JCT ratios of the two estimators against evict and the best fixed TTL of this seed, and the
// most any lease policy could gain over evict.
void PrintRatios(const std::vector<sim::Result>& results, const std::string& prefix) {
  const Rows rows{results.size()};
  const sim::Result& evict = results.front();
  const sim::Result& best = results[rows.BestFixed(JctMeans(results))];
  for (size_t i : rows.Estimators()) {
    const sim::Result& est = results[i];
    std::printf(
        "%s%s: JCT %.3fx vs evict-at-turn-end (goal >= 1.1x), %.3fx vs the best fixed TTL "
        "(%s; goal >= 1.0x); TTFT %.2fx vs evict\n",
        prefix.c_str(), est.policy.c_str(), evict.jct_mean_s / est.jct_mean_s,
        best.jct_mean_s / est.jct_mean_s, best.policy.c_str(), evict.ttft_mean_s / est.ttft_mean_s);
  }
  std::printf("%sno lease policy beats evict by more than %.3fx here (every later turn hot)\n",
              prefix.c_str(), evict.jct_mean_s / results[rows.Bound()].jct_mean_s);
}

// Over several seeds. A loaded cluster's JCT is chaotic in the policy's parameters: moving a
// fixed TTL by a few seconds moves one seed's mean JCT by several per cent either way
// (bench/RESULTS.md "Coordinator simulation"), so the best fixed TTL picked per seed in hindsight
// takes the luckiest of its candidates' draws. Here every policy keeps one setting for the
// workload, as an operator would:
// the best fixed TTL is the one with the lowest JCT averaged over the seeds, and the estimator
// is compared with it on that average and on each seed.
void PrintAcrossSeeds(const std::vector<std::vector<sim::Result>>& by_seed, const char* mode) {
  const Rows rows{by_seed.front().size()};
  std::vector<double> mean(rows.n, 0);
  for (const std::vector<sim::Result>& seed : by_seed) {
    for (size_t i = 0; i < rows.n; ++i) mean[i] += seed[i].jct_mean_s / by_seed.size();
  }
  std::printf("\n%s, %zu seeds: each policy's JCT mean, averaged over the seeds\n", mode,
              by_seed.size());
  std::printf("| policy | JCT mean s | lowest seed | highest seed |\n|---|---:|---:|---:|\n");
  for (size_t i = 0; i < rows.n; ++i) {
    double lo = by_seed.front()[i].jct_mean_s, hi = lo;
    for (const std::vector<sim::Result>& seed : by_seed) {
      lo = std::min(lo, seed[i].jct_mean_s);
      hi = std::max(hi, seed[i].jct_mean_s);
    }
    std::printf("| %s | %.2f | %.2f | %.2f |\n", by_seed.front()[i].policy.c_str(), mean[i], lo,
                hi);
  }
  const size_t best = rows.BestFixed(mean);
  const std::string& best_name = by_seed.front()[best].policy;
  for (size_t e : rows.Estimators()) {
    std::printf(
        "%s over the seeds: JCT %.3fx vs evict-at-turn-end (goal >= 1.1x), %.3fx vs the best "
        "fixed TTL over the seeds (%s; goal >= 1.0x); per seed vs %s:",
        by_seed.front()[e].policy.c_str(), mean[0] / mean[e], mean[best] / mean[e],
        best_name.c_str(), best_name.c_str());
    for (const std::vector<sim::Result>& seed : by_seed) {
      std::printf(" %.3f", seed[best].jct_mean_s / seed[e].jct_mean_s);
    }
    std::printf("\n");
  }
  std::printf(
      "no lease policy beats evict by more than %.3fx over the seeds (every later turn hot)\n",
      mean[0] / mean[rows.Bound()]);
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
  std::vector<std::vector<sim::Result>> by_seed[2];  // per mode, per seed, per policy
  for (int k = 0; k < flags.seeds; ++k) {
    w.seed = flags.seed + k;
    std::vector<sim::SessionSpec> workload = sim::MakeWorkload(w);
    for (int m = 0; m < 2; ++m) {
      const auto& [title, mode] = modes[m];
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
      by_seed[m].push_back(*std::move(results));
    }
    if (k == 0 && flags.seeds > 1) std::printf("\nother seeds (same settings):\n");
  }
  if (flags.seeds > 1) {
    for (int m = 0; m < 2; ++m) PrintAcrossSeeds(by_seed[m], ModeName(modes[m].second));
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

// RocksDB in `dir`, or (--etcd) a one-member etcd under `dir` that lives as long as the program.
absl::StatusOr<std::unique_ptr<StateStore>> OpenStore(const Flags& flags, const std::string& dir) {
  if (!flags.etcd) {
    ASSIGN_OR_RETURN(std::unique_ptr<RocksStateStore> rocks,
                     RocksStateStore::Open({dir, flags.sync}));
    return rocks;
  }
  static std::unique_ptr<etcd::EtcdProcess> etcd;
  ASSIGN_OR_RETURN(etcd, etcd::EtcdProcess::Start(dir + "-etcd"));
  EtcdStateStoreOptions o;
  o.etcd.endpoints = {etcd->endpoint()};
  ASSIGN_OR_RETURN(std::unique_ptr<EtcdStateStore> store, EtcdStateStore::Create(o));
  return store;
}

int RunGrpcLoad(const Flags& flags) {
  if (flags.grpc_seconds <= 0) return 0;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("glimpse_coord_bench_" + std::to_string(::getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStore(flags, dir);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    return 1;
  }
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
      "%s state store (%s), %.1f s\n",
      flags.clients, flags.etcd ? "etcd" : "RocksDB",
      flags.etcd ? absl::StrFormat("one member on loopback: %d transactions for %.0f calls",
                                   static_cast<EtcdStateStore&>(**store).transactions(), ops)
                       .c_str()
      : flags.sync ? absl::StrFormat("fsync before each acknowledgement: %d fsyncs for %.0f calls",
                                     static_cast<RocksStateStore&>(**store).syncs(), ops)
                         .c_str()
                   : "no fsync",
      seconds);
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
                 "[--min_samples=N] [--ttls=S1,S2,...] [--grpc_seconds=T] [--clients=C] "
                 "[--sync] [--etcd] [--figures=FILE]\n",
                 argv[0]);
    return 2;
  }
  if (int rc = glimpse::coordinator::RunSimulations(flags); rc != 0) return rc;
  return glimpse::coordinator::RunGrpcLoad(flags);
}
