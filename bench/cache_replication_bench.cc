// glimpse_bench_cache_replication: what keeping each state on R cache nodes costs a worker. For
// each (nodes, R) of (1, 1), (2, 1), (2, 2), (3, 1), (3, 2): fresh glimpse-cache-node processes
// on this host (UCX over TCP on loopback, as between hosts), one CacheClient over all of them
// (2 UCX engines, as a worker's cache_engines) shared by --clients threads, which put distinct
// states of 16 pages of ~64 KiB (63 tokens × head_dim 256, fp16) until --put_mib MiB are
// stored, then get each once (shuffled; the nodes' warm tier is 4 MiB, so gets read RocksDB).
// GB/s = state page bytes / wall time (a put of R copies counts once); put and get latency
// p50 / p99 per state; the last column is a put's p50 over the same node count's R = 1 p50.
// Then repair: three nodes with their replicators on, the states put with R = 2, one node
// SIGKILLed, and the time until the survivors count no state short of two copies. Last, the same
// with membership on a local etcd member (core/cluster/etcd_membership.h, ttl 3 s, no lists): a
// client reading every state in turn while node 1 is SIGKILLed (its slowest read, the time until
// its list drops the node, and until the survivors repaired), then while a fourth node joins (the
// time until it is listed, and until every state is on exactly two nodes again).
//
//   glimpse_bench_cache_replication [--put_mib=128] [--clients=4]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/flags.h"
#include "core/cache_client/cache_client.h"
#include "core/cluster/etcd_membership.h"
#include "core/common/http_server.h"
#include "core/common/progress.h"
#include "core/common/service_process.h"
#include "core/common/status_macros.h"
#include "core/etcd/etcd_process.h"
#include "core/kvstate/test_state.h"
#include "core/transport/ucx/ucx_transport.h"

namespace glimpse::cache_node {
namespace {

using kvstate::testing::TestState;

struct Flags {
  size_t put_mib = 128;
  int clients = 4;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    if (bench::FlagValue(a, "put_mib", &v)) {
      if (!absl::SimpleAtoi(v, &f->put_mib) || f->put_mib < 1) return false;
    } else if (bench::FlagValue(a, "clients", &v)) {
      if (!absl::SimpleAtoi(v, &f->clients) || f->clients < 1) return false;
    } else {
      return false;
    }
  }
  return true;
}

kvstate::testing::TestStateShape Shape() {
  kvstate::testing::TestStateShape shape;  // 65,852-byte pages, 16 per state
  shape.layers = 8;
  shape.kv_heads = 2;
  shape.pages_per_head = 1;
  shape.tokens_per_page = 63;
  shape.head_dim = 256;
  return shape;
}

// States apart from the measured ones (other seeds).
const std::vector<TestState>& Warmup(int n) {
  static const std::vector<TestState> states = [n] {
    std::vector<TestState> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(*kvstate::testing::MakeTestState(kvstate::testing::TestNamespace(),
                                                     kvstate::testing::TestModel(), Shape(),
                                                     1'000'000 + i));
    }
    return out;
  }();
  return states;
}

std::vector<TestState> MakeStates(size_t put_mib) {
  const kvstate::testing::TestStateShape shape = Shape();
  const auto ns = kvstate::testing::TestNamespace();
  const auto model = kvstate::testing::TestModel();
  const size_t per_state =
      kvstate::testing::MakeTestState(ns, model, shape, 1)->manifest.total_page_bytes();
  const size_t n = std::max<size_t>(1, (put_mib << 20) / per_state);
  std::vector<TestState> out;
  ProgressBar bar("generating states", static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) {
    out.push_back(*kvstate::testing::MakeTestState(ns, model, shape, i + 1));
    bar.Update(static_cast<int64_t>(i + 1));
  }
  bar.Done();
  return out;
}

struct Row {
  int nodes = 0, replicas = 0;
  double put_gbps = 0, get_gbps = 0;
  double put_p50_ms = 0, put_p99_ms = 0, get_p50_ms = 0, get_p99_ms = 0;
};

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// `threads` threads run `op(i)` for every i in [0, n); returns the wall seconds and each op's ms.
template <typename Op>
absl::StatusOr<std::pair<double, std::vector<double>>> Phase(const std::string& label, int threads,
                                                             size_t n, Op op) {
  std::atomic<size_t> next{0};
  std::vector<double> ms(n);
  std::mutex mu;
  absl::Status failed;
  ProgressBar bar(label, static_cast<int64_t>(n));
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        const absl::Time t0 = absl::Now();
        absl::Status st = op(i);
        ms[i] = absl::ToDoubleMilliseconds(absl::Now() - t0);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (failed.ok()) failed = st;
          return;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  bar.Update(static_cast<int64_t>(n));
  bar.Done();
  RETURN_IF_ERROR(failed);
  return std::make_pair(seconds, std::move(ms));
}

absl::StatusOr<Row> Measure(const Flags& f, const std::vector<TestState>& states, int nodes,
                            int replicas, const std::filesystem::path& dir) {
  std::vector<ServiceProcess> procs;
  std::vector<std::string> addresses;
  for (int i = 0; i < nodes; ++i) {
    const std::filesystem::path db = dir / absl::StrCat("n", nodes, "r", replicas, "-", i);
    ASSIGN_OR_RETURN(ServiceProcess p,
                     ServiceProcess::Start(GLIMPSE_CACHE_NODE_BINARY,
                                           {"--storage.path=" + db.string(), "--warm.bytes=4MiB",
                                            "--storage.sync_every_put=false"},
                                           db.string() + ".log"));
    addresses.push_back(p.grpc_address());
    procs.push_back(std::move(p));
  }
  std::vector<std::unique_ptr<transport::Transport>> transports;
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t, transport::CreateUcxTransport());
    transports.push_back(std::move(t));
  }
  cache_client::CacheClientOptions o;
  o.addresses = addresses;
  o.timeout = absl::Seconds(60);
  o.replicas = replicas;
  ASSIGN_OR_RETURN(std::unique_ptr<cache_client::CacheClient> client,
                   cache_client::CacheClient::Create(o, std::move(transports)));
  // Untimed: one put and get per thread at once, so that every connection (each node, each
  // engine) exists before the clock starts.
  const std::vector<TestState>& warmup = Warmup(f.clients);
  RETURN_IF_ERROR(Phase("connecting", f.clients, warmup.size(), [&](size_t i) {
                    const TestState& s = warmup[i];
                    RETURN_IF_ERROR(client->Put(s.manifest, s.tokens, s.spans()).status());
                    return client
                        ->Get(s.manifest.namespace_key, s.manifest.state_key, s.manifest.model)
                        .status();
                  }).status());
  size_t bytes = 0;
  for (const TestState& s : states) bytes += s.manifest.total_page_bytes();
  const std::string config = absl::StrCat(nodes, " node(s), R=", replicas);
  ASSIGN_OR_RETURN(
      auto put, Phase("put, " + config, f.clients, states.size(), [&](size_t i) {
        return client->Put(states[i].manifest, states[i].tokens, states[i].spans()).status();
      }));
  std::vector<size_t> order(states.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  ASSIGN_OR_RETURN(auto get, Phase("get, " + config, f.clients, states.size(), [&](size_t i) {
                     const kvstate::Manifest& m = states[order[i]].manifest;
                     return client->Get(m.namespace_key, m.state_key, m.model).status();
                   }));
  Row r{nodes, replicas};
  r.put_gbps = bytes / put.first / 1e9;
  r.get_gbps = bytes / get.first / 1e9;
  r.put_p50_ms = Percentile(put.second, 0.5);
  r.put_p99_ms = Percentile(put.second, 0.99);
  r.get_p50_ms = Percentile(get.second, 0.5);
  r.get_p99_ms = Percentile(get.second, 0.99);
  return r;
}

// The value of an unlabelled metric family in Prometheus text; -1 when absent.
double MetricValue(const std::string& text, const std::string& name) {
  size_t at = 0;
  while ((at = text.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::atof(text.c_str() + at + name.size() + 1);
    at += name.size();
  }
  return -1;
}

struct Repair {
  double seconds = 0;
  double bytes = 0;
};

// Three nodes with their replicators on (scanning every 100 ms, copies unthrottled), R = 2: the
// states put, node 1 SIGKILLed, and the time until both survivors have scanned twice since and
// count no state short of two copies; the page bytes they copied meanwhile.
absl::StatusOr<Repair> MeasureRepair(const Flags& f, const std::vector<TestState>& states,
                                     const std::filesystem::path& dir) {
  std::vector<int> ports;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(const int port, FreeLoopbackPort());
    ports.push_back(port);
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  std::vector<ServiceProcess> procs;
  for (int i = 0; i < 3; ++i) {
    const std::filesystem::path db = dir / absl::StrCat("repair-", i);
    ASSIGN_OR_RETURN(
        ServiceProcess p,
        ServiceProcess::Start(GLIMPSE_CACHE_NODE_BINARY,
                              {"--listen=" + addresses[i], "--storage.path=" + db.string(),
                               "--warm.bytes=4MiB", "--storage.sync_every_put=false",
                               absl::StrCat("--replication.peers=", absl::StrJoin(addresses, ",")),
                               "--replication.self=" + addresses[i], "--replication.interval=100ms",
                               "--replication.rate=64GiB"},
                              db.string() + ".log"));
    procs.push_back(std::move(p));
  }
  std::vector<std::unique_ptr<transport::Transport>> transports;
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t, transport::CreateUcxTransport());
  transports.push_back(std::move(t));
  cache_client::CacheClientOptions o;
  o.addresses = addresses;
  o.timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(std::unique_ptr<cache_client::CacheClient> client,
                   cache_client::CacheClient::Create(o, std::move(transports)));
  RETURN_IF_ERROR(
      Phase("put, repair setup", f.clients, states.size(), [&](size_t i) {
        return client->Put(states[i].manifest, states[i].tokens, states[i].spans()).status();
      }).status());
  auto metric = [&](int i, const char* name) {
    absl::StatusOr<std::string> text = HttpGet("127.0.0.1", procs[i].metrics_port(), "/metrics");
    return text.ok() ? MetricValue(*text, name) : -1;
  };
  const double copied_before = metric(0, "glimpse_cache_node_replication_copied_bytes_total") +
                               metric(2, "glimpse_cache_node_replication_copied_bytes_total");
  const double scans0 = metric(0, "glimpse_cache_node_replication_scans_total");
  const double scans2 = metric(2, "glimpse_cache_node_replication_scans_total");
  procs[1].Kill();
  const absl::Time killed = absl::Now();
  while (true) {
    if (absl::Now() - killed > absl::Minutes(10)) {
      return absl::DeadlineExceededError("the repair did not finish within 10 minutes");
    }
    absl::SleepFor(absl::Milliseconds(20));
    if (metric(0, "glimpse_cache_node_replication_scans_total") < scans0 + 2 ||
        metric(2, "glimpse_cache_node_replication_scans_total") < scans2 + 2) {
      continue;
    }
    if (metric(0, "glimpse_cache_node_under_replicated_states") == 0 &&
        metric(2, "glimpse_cache_node_under_replicated_states") == 0) {
      break;
    }
  }
  Repair r;
  r.seconds = absl::ToDoubleSeconds(absl::Now() - killed);
  r.bytes = metric(0, "glimpse_cache_node_replication_copied_bytes_total") +
            metric(2, "glimpse_cache_node_replication_copied_bytes_total") - copied_before;
  return r;
}

// A client reading the states in turn until stopped: how many reads, how many failed, the slowest.
class Reader {
 public:
  Reader(cache_client::CacheClient& client, const std::vector<TestState>& states)
      : thread_([this, &client, &states] {
          for (size_t i = 0; !stop_; ++i) {
            const TestState& s = states[i % states.size()];
            const absl::Time t0 = absl::Now();
            const bool ok =
                client.Get(s.manifest.namespace_key, s.manifest.state_key, s.manifest.model).ok();
            const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
            std::lock_guard<std::mutex> lock(mu_);
            ++reads_;
            failed_ += ok ? 0 : 1;
            slowest_ms_ = std::max(slowest_ms_, ms);
          }
        }) {}
  ~Reader() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::string Summary() {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::StrFormat("%d reads, %d failed, the slowest %.0f ms", reads_, failed_,
                           slowest_ms_);
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  int reads_ = 0, failed_ = 0;
  double slowest_ms_ = 0;
  std::thread thread_;
};

// Waits until `done` holds; the seconds since `from`. DEADLINE_EXCEEDED after 10 minutes.
template <typename Pred>
absl::StatusOr<double> SecondsUntil(absl::Time from, const std::string& what, Pred done) {
  while (!done()) {
    if (absl::Now() - from > absl::Minutes(10)) {
      return absl::DeadlineExceededError(what + " did not happen within 10 minutes");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::ToDoubleSeconds(absl::Now() - from);
}

// Membership on etcd: three nodes announce themselves (ttl 3 s) and replicate (scans every
// 100 ms, unthrottled); a client follows the live ones. Prints what a client sees of a node's
// SIGKILL and of a fourth node's joining.
absl::Status MeasureMembership(const Flags& f, const std::vector<TestState>& states,
                               const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdProcess> etcd,
                   etcd::EtcdProcess::Start((dir / "etcd").string()));
  std::vector<ServiceProcess> procs;
  auto start = [&](int i) -> absl::Status {
    const std::filesystem::path db = dir / absl::StrCat("member-", i);
    ASSIGN_OR_RETURN(
        ServiceProcess p,
        ServiceProcess::Start(
            GLIMPSE_CACHE_NODE_BINARY,
            {"--storage.path=" + db.string(), "--warm.bytes=4MiB", "--storage.sync_every_put=false",
             "--membership.etcd_endpoints=" + etcd->endpoint(), "--replication.interval=100ms",
             "--replication.rate=64GiB"},
            db.string() + ".log"));
    procs.push_back(std::move(p));
    return absl::OkStatus();
  };
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(start(i));
  std::vector<std::unique_ptr<transport::Transport>> transports;
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t, transport::CreateUcxTransport());
  transports.push_back(std::move(t));
  cache_client::CacheClientOptions o;
  o.timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(std::unique_ptr<cache_client::CacheClient> client,
                   cache_client::CacheClient::Create(o, std::move(transports)));
  cluster::EtcdMembershipOptions m;
  m.etcd_endpoints = {etcd->endpoint()};
  ASSIGN_OR_RETURN(
      std::unique_ptr<cluster::EtcdMembership> membership,
      cluster::EtcdMembership::Start(m, [c = client.get()](const std::vector<std::string>& live) {
        c->SetNodes(live).IgnoreError();
      }));
  auto listed = [&](size_t n) { return client->nodes().size() == n; };
  RETURN_IF_ERROR(
      SecondsUntil(absl::Now(), "listing three nodes", [&] { return listed(3); }).status());
  RETURN_IF_ERROR(
      Phase("put, membership setup", f.clients, states.size(), [&](size_t i) {
        return client->Put(states[i].manifest, states[i].tokens, states[i].spans()).status();
      }).status());
  auto metric = [&](size_t i, const char* name) {
    absl::StatusOr<std::string> text = HttpGet("127.0.0.1", procs[i].metrics_port(), "/metrics");
    return text.ok() ? MetricValue(*text, name) : -1;
  };
  // Settled: each live node has scanned twice since `since_scans` and counts no state short of
  // two copies, and the copies sum to two per state.
  auto settled = [&](const std::vector<size_t>& live, const std::vector<double>& since_scans) {
    double copies = 0;
    for (size_t k = 0; k < live.size(); ++k) {
      if (metric(live[k], "glimpse_cache_node_replication_scans_total") < since_scans[k] + 2 ||
          metric(live[k], "glimpse_cache_node_under_replicated_states") != 0) {
        return false;
      }
      copies += metric(live[k], "glimpse_cache_node_states");
    }
    return copies == 2.0 * static_cast<double>(states.size());
  };
  auto scans = [&](const std::vector<size_t>& live) {
    std::vector<double> out;
    for (size_t i : live) out.push_back(metric(i, "glimpse_cache_node_replication_scans_total"));
    return out;
  };

  Reader during_death(*client, states);
  procs[1].Kill();
  const absl::Time killed = absl::Now();
  ASSIGN_OR_RETURN(const double dropped,
                   SecondsUntil(killed, "dropping the dead node", [&] { return listed(2); }));
  const std::vector<double> scans_at_drop = scans({0, 2});
  ASSIGN_OR_RETURN(const double repaired, SecondsUntil(killed, "the repair", [&] {
                     return settled({0, 2}, scans_at_drop);
                   }));
  during_death.Stop();
  std::printf(
      "membership on etcd (ttl 3 s, R=2, scans every 100 ms): node 1 SIGKILLed: the client's "
      "list dropped it after %.2f s, the survivors repaired by %.2f s; reads meanwhile: %s\n",
      dropped, repaired, during_death.Summary().c_str());

  Reader during_join(*client, states);
  const absl::Time joining = absl::Now();
  RETURN_IF_ERROR(start(3));
  ASSIGN_OR_RETURN(const double joined,
                   SecondsUntil(joining, "listing the new node", [&] { return listed(3); }));
  const std::vector<double> scans_at_join = scans({0, 2, 3});
  ASSIGN_OR_RETURN(const double moved, SecondsUntil(joining, "the rebalance", [&] {
                     return settled({0, 2, 3}, scans_at_join);
                   }));
  during_join.Stop();
  std::printf(
      "a new node started: listed after %.2f s (its start included), every state on exactly two "
      "nodes by %.2f s, %.0f states on the new one; reads meanwhile: %s\n",
      joined, moved, metric(3, "glimpse_cache_node_states"), during_join.Summary().c_str());
  return absl::OkStatus();
}

int Run(const Flags& f) {
  setenv("UCX_TLS", "tcp,self", 1);  // as between hosts (and a node's death is detected)
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("glimpse-replication-bench-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<TestState> states = MakeStates(f.put_mib);
  std::vector<Row> rows;
  for (const auto& [nodes, replicas] :
       std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {2, 2}, {3, 1}, {3, 2}}) {
    absl::StatusOr<Row> r = Measure(f, states, nodes, replicas, dir);
    if (!r.ok()) {
      std::fprintf(stderr, "%d nodes, R=%d: %s (logs in %s)\n", nodes, replicas,
                   r.status().ToString().c_str(), dir.c_str());
      return 1;
    }
    rows.push_back(*r);
  }
  std::map<int, double> r1_put_p50;
  for (const Row& r : rows) {
    if (r.replicas == 1) r1_put_p50[r.nodes] = r.put_p50_ms;
  }
  std::printf("cache replication: %zu states of %.2f MB, %d client threads, UCX tcp on loopback\n",
              states.size(), states[0].manifest.total_page_bytes() / 1e6, f.clients);
  std::printf("%5s %2s %9s %9s %12s %12s %12s %12s %14s\n", "nodes", "R", "put GB/s", "get GB/s",
              "put p50 ms", "put p99 ms", "get p50 ms", "get p99 ms", "put p50 / R=1");
  for (const Row& r : rows) {
    std::printf("%5d %2d %9.3f %9.3f %12.2f %12.2f %12.2f %12.2f %14.2f\n", r.nodes, r.replicas,
                r.put_gbps, r.get_gbps, r.put_p50_ms, r.put_p99_ms, r.get_p50_ms, r.get_p99_ms,
                r.put_p50_ms / r1_put_p50[r.nodes]);
  }
  absl::StatusOr<Repair> repair = MeasureRepair(f, states, dir);
  if (!repair.ok()) {
    std::fprintf(stderr, "repair: %s (logs in %s)\n", repair.status().ToString().c_str(),
                 dir.c_str());
    return 1;
  }
  std::printf(
      "repair after a node's SIGKILL (3 nodes, R=2, scans every 100 ms, unthrottled): "
      "%.1f MB copied in %.2f s, %.1f MB/s (including the scans that found the death)\n",
      repair->bytes / 1e6, repair->seconds, repair->bytes / 1e6 / repair->seconds);
  if (absl::Status st = MeasureMembership(f, states, dir); !st.ok()) {
    std::fprintf(stderr, "membership: %s (logs in %s)\n", st.ToString().c_str(), dir.c_str());
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace glimpse::cache_node

int main(int argc, char** argv) {
  glimpse::cache_node::Flags flags;
  if (!glimpse::cache_node::ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr, "usage: %s [--put_mib=128] [--clients=4]\n", argv[0]);
    return 2;
  }
  return glimpse::cache_node::Run(flags);
}
