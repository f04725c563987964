// glimpse_bench_cache_node: glimpse-cache-node throughput and latency beside RocksDB's own
// db_bench, measured in the same run on the same filesystem.
//
//   put     --clients threads sharing one CacheClient over --client_engines UCX engines (2, as a
//           worker's cache_engines; shm + tcp on loopback), put distinct states of --pages pages
//           of ~64 KiB (63 tokens × head_dim 256, fp16) until --put_mib MiB are stored;
//           GB/s = page bytes / wall time, ops/s = pages / s.
//   get     after a restart, the same threads on a new client, kept for the three passes as a
//           worker keeps its own, get every state (shuffled), whole, --get_batch states per
//           GetMany request (1: one Get per state), twice: cold (RocksDB read, packed, shipped
//           over UCX, admitted to the warm tier; the client verifies every page's CRC32C), then
//           warm (from memory); then once more warm with one Get per state.
//   lookup  --lookup_clients threads (own gRPC channel each) each look up --lookups token
//           sequences (a stored state's tokens plus unstored ones, 4096 in all); p50 / p99.
//   db_bench fillrandom with value_size=65536, compression_type=none, the same thread count,
//           batch_size = pages per state and sync = storage.sync_every_put (one synced 16-value
//           WriteBatch per op, as one put), cache_size = the node's block cache, the same number
//           of values written as pages put (--num = that count, --writes = its share per thread:
//           random keys, so about 63 % of them distinct); then, like the node, reopened (block
//           cache empty) for readrandom twice with as many reads: the first pass is the cold one
//           (a key not read before comes from the files; about a third of reads repeat a key),
//           the second the warm one (block cache).
// Ratios: ours / db_bench in bytes per second. GB = 1e9 bytes (db_bench's MB/s are MiB/s).
// --rounds rounds alternate the node phases and db_bench; every figure is the median over rounds.
// Prints progress while running, a table at the end, and JSON (--json).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cache_client/cache_client.h"
#include "core/cache_client/proto_convert.h"
#include "core/common/grpc/server.h"
#include "core/common/http_server.h"
#include "core/common/progress.h"
#include "core/common/service_process.h"
#include "core/common/status_macros.h"
#include "core/kvstate/test_state.h"
#include "core/kvstate/transfer_header.h"
#include "core/transport/ucx/ucx_transport.h"
#include "nlohmann/json.hpp"

namespace glimpse::cache_node {
namespace {

using kvstate::testing::TestState;

struct Config {
  size_t put_mib = 256;
  int clients = 4;
  int pages = 16;
  int lookup_clients = 16;
  int lookups = 500;  // per lookup client
  int rounds = 3;     // node and db_bench alternate; medians are reported
  int get_batch = 8;  // states per GetMany (1: one Get per state)
  int client_engines = 2;
  bool sync = true;
  std::string dir = GLIMPSE_BENCH_DIR;
  std::string node = GLIMPSE_CACHE_NODE_BINARY;
  std::string db_bench;  // empty: db_bench or rocksdb_db_bench from PATH
  std::string json = GLIMPSE_BENCH_JSON;
};

constexpr size_t kBlockCache = size_t{256} << 20;
constexpr size_t kLookupTokens = 4096;

bool ParseFlag(const std::string& arg, Config* c) {
  const auto eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos) return false;
  const std::string k = arg.substr(2, eq - 2), v = arg.substr(eq + 1);
  int64_t n = 0;
  const bool num = absl::SimpleAtoi(v, &n) && n > 0;
  const std::map<std::string, int*> ints = {{"clients", &c->clients},
                                            {"pages", &c->pages},
                                            {"lookup_clients", &c->lookup_clients},
                                            {"lookups", &c->lookups},
                                            {"rounds", &c->rounds},
                                            {"get_batch", &c->get_batch},
                                            {"client_engines", &c->client_engines}};
  const std::map<std::string, std::string*> strings = {
      {"dir", &c->dir}, {"node", &c->node}, {"db_bench", &c->db_bench}, {"json", &c->json}};
  if (auto it = ints.find(k); it != ints.end() && num) {
    *it->second = static_cast<int>(n);
  } else if (k == "put_mib" && num) {
    c->put_mib = n;
  } else if (k == "sync" && (v == "true" || v == "false")) {
    c->sync = v == "true";
  } else if (auto it = strings.find(k); it != strings.end()) {
    *it->second = v;
  } else {
    return false;
  }
  return true;
}

std::string FindDbBench() {
  for (const char* name : {"db_bench", "rocksdb_db_bench"}) {
    const std::string path_env = std::getenv("PATH") ? std::getenv("PATH") : "";
    size_t start = 0;
    while (start <= path_env.size()) {
      size_t end = path_env.find(':', start);
      if (end == std::string::npos) end = path_env.size();
      std::string p = path_env.substr(start, end - start) + "/" + name;
      if (access(p.c_str(), X_OK) == 0) return p;
      start = end + 1;
    }
  }
  return "";
}

struct Percentiles {
  double p50_us = 0, p99_us = 0, mean_us = 0;
};
Percentiles Summarise(std::vector<double> us) {
  Percentiles p;
  if (us.empty()) return p;
  std::sort(us.begin(), us.end());
  p.p50_us = us[us.size() / 2];
  p.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  double sum = 0;
  for (double v : us) sum += v;
  p.mean_us = sum / us.size();
  return p;
}

std::unique_ptr<cache_client::CacheClient> NewClient(const ServiceProcess& node, int engines) {
  std::vector<std::unique_ptr<transport::Transport>> transports;
  for (int i = 0; i < engines; ++i) {
    auto t = transport::CreateUcxTransport();
    if (!t.ok()) {
      std::fprintf(stderr, "UCX: %s\n", t.status().ToString().c_str());
      return nullptr;
    }
    transports.push_back(*std::move(t));
  }
  auto c = cache_client::CacheClient::Create({{node.grpc_address()}, {}, absl::Seconds(60)},
                                             std::move(transports));
  if (!c.ok()) return nullptr;
  return *std::move(c);
}

// `client` shared by `threads` threads: runs `warmup(client, t)` once per thread, all at once
// (connections, for every engine the calls spread over; untimed), then `body(client, i)` for i in
// [0, n) spread over the threads; returns the seconds of the bodies.
template <typename Warmup, typename Body>
absl::StatusOr<double> RunPhase(const char* label, cache_client::CacheClient& client, int threads,
                                size_t n, Warmup warmup, Body body) {
  {
    std::vector<absl::Status> warm(threads);
    std::vector<std::thread> warmers;
    for (int t = 0; t < threads; ++t) {
      warmers.emplace_back([&, t] { warm[t] = warmup(client, t); });
    }
    for (auto& w : warmers) w.join();
    for (const absl::Status& s : warm) RETURN_IF_ERROR(s);
  }
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  absl::Status first_error;
  ProgressBar bar(label, n);
  const absl::Time start = absl::Now();
  // When each worker ran out of work: the phase ends with the last of them. (The loop below
  // only wakes every 100 ms for the progress bar; timing its exit rounded a 0.11 s phase up to
  // 0.2 s.)
  std::vector<absl::Time> ends(threads, start);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        absl::Status s = body(client, i);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = s;
          return;
        }
        done.fetch_add(1);
      }
      ends[t] = absl::Now();
    });
  }
  while (done.load() < n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_error.ok()) break;
    }
    bar.Update(done.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& w : workers) w.join();
  const double seconds = absl::ToDoubleSeconds(*std::max_element(ends.begin(), ends.end()) - start);
  bar.Update(done.load());
  bar.Done();
  if (!first_error.ok()) return first_error;
  return seconds;
}

struct DbBenchRow {
  double ops_per_sec = 0, mib_per_sec = 0, micros_per_op = 0;
};

// Runs db_bench with `args`; the rows it reports, in order (readrandom twice: "readrandom",
// "readrandom#2").
absl::Status RunDbBenchOnce(const std::string& cmd, std::map<std::string, DbBenchRow>* rows) {
  std::printf("running: %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen db_bench failed");
  const std::regex re(R"(^(\w+)\s*:\s*([0-9.]+) micros/op ([0-9]+) ops/sec.*;\s*([0-9.]+) MB/s)");
  char line[4096];
  while (fgets(line, sizeof(line), p) != nullptr) {
    std::string l(line);
    std::smatch m;
    if (std::regex_search(l, m, re)) {
      std::string name = m[1];
      if (rows->count(name) > 0) name += "#2";
      (*rows)[name] = {std::stod(m[3]), std::stod(m[4]), std::stod(m[2])};
      std::printf("  db_bench %s", line);
    } else if (l.find("ops") != std::string::npos || l.find("rror") != std::string::npos) {
      std::printf("  db_bench | %s", line);  // progress / errors
    }
    std::fflush(stdout);
  }
  const int rc = pclose(p);
  if (rc != 0) return absl::InternalError(absl::StrCat("db_bench failed (status ", rc, ")"));
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, DbBenchRow>> RunDbBench(const Config& c, size_t values) {
  const std::string bin = c.db_bench.empty() ? FindDbBench() : c.db_bench;
  if (bin.empty()) return absl::NotFoundError("db_bench / rocksdb_db_bench not found in PATH");
  const std::string db = c.dir + "/db_bench";
  std::filesystem::remove_all(db);
  const std::string common = absl::StrCat(
      " --db=", db, " --num=", values, " --threads=", c.clients,
      " --value_size=65536 --key_size=28 --compression_type=none --sync=", c.sync ? 1 : 0,
      " --batch_size=", c.pages, " --cache_size=", kBlockCache, " --write_buffer_size=", 64 << 20,
      " --stats_interval_seconds=5");
  std::map<std::string, DbBenchRow> rows;
  RETURN_IF_ERROR(RunDbBenchOnce(
      absl::StrCat(bin, " --benchmarks=fillrandom --writes=", values / c.clients, common, " 2>&1"),
      &rows));
  RETURN_IF_ERROR(RunDbBenchOnce(
      absl::StrCat(bin, " --benchmarks=readrandom,readrandom --use_existing_db=1 --reads=",
                   values / c.clients, common, " 2>&1"),
      &rows));
  if (rows.count("fillrandom") == 0 || rows.count("readrandom") == 0 ||
      rows.count("readrandom#2") == 0) {
    return absl::InternalError("db_bench printed no fillrandom / readrandom figures");
  }
  std::filesystem::remove_all(db);
  return rows;
}

absl::StatusOr<ServiceProcess> StartNode(const Config& c, const std::string& db,
                                         const std::string& warm_bytes) {
  return ServiceProcess::Start(
      c.node,
      {"--storage.path=" + db, "--warm.bytes=" + warm_bytes,
       absl::StrCat("--storage.block_cache=", kBlockCache),
       absl::StrCat("--storage.sync_every_put=", c.sync ? "true" : "false")},
      c.dir + "/node.log");
}

// The transport alone, same pattern as a get: `threads` threads each ship one packed state at a
// time from one UcxTransport to another (in this process) and wait for it; GB/s.
absl::StatusOr<double> TransportCeiling(const std::vector<TestState>& states, int threads) {
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> tx, transport::CreateUcxTransport());
  ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> rx, transport::CreateUcxTransport());
  ASSIGN_OR_RETURN(transport::PeerId peer, tx->Connect(rx->LocalAddress()));
  std::vector<uint8_t> packed;
  for (const auto& p : states[0].pages) packed.insert(packed.end(), p.begin(), p.end());
  const size_t n = states.size();
  std::atomic<bool> stop{false};
  std::atomic<size_t> received{0};
  absl::Time last_received;  // written by the receiver, read after it is joined
  std::thread receiver([&] {
    while (!stop.load()) {
      if (rx->Receive(absl::Now() + absl::Milliseconds(50)).ok() &&
          received.fetch_add(1) + 1 == n) {
        last_received = absl::Now();
      }
    }
  });
  std::atomic<size_t> next{0};
  std::atomic<int> errors{0};
  ProgressBar bar("transport ceiling", n);
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      uint8_t header[kvstate::kBatchHeaderBytes] = {};
      const std::span<const uint8_t> bufs[] = {header, packed};
      transport::SubmitOptions so;
      so.checksum = false;  // as the node ships pages
      while (next.fetch_add(1) < n) {
        auto id = tx->Submit(peer, bufs, so);
        if (!id.ok() || !tx->Wait(*id, absl::Now() + absl::Seconds(30)).ok()) errors.fetch_add(1);
      }
    });
  }
  while (received.load() < n && errors.load() == 0 && absl::Now() - start < absl::Seconds(120)) {
    bar.Update(received.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& w : workers) w.join();
  stop.store(true);
  receiver.join();
  bar.Done();
  if (errors.load() > 0 || received.load() < n)
    return absl::InternalError("transport ceiling run failed");
  return n * packed.size() / absl::ToDoubleSeconds(last_received - start) / 1e9;
}

struct Workload {
  kvstate::NamespaceKey ns;
  kvstate::Fingerprint model;
  std::vector<TestState> states;  // measured
  std::vector<TestState> warmup;  // one per client thread, untimed
  size_t total_bytes = 0;
};

Workload MakeWorkload(const Config& c) {
  kvstate::testing::TestStateShape shape;  // 63 tokens × head_dim 256, fp16: 65,852-byte pages
  shape.layers = c.pages / 2;
  shape.kv_heads = 2;
  shape.pages_per_head = 1;
  shape.tokens_per_page = 63;
  shape.head_dim = 256;
  Workload w{kvstate::testing::TestNamespace(), kvstate::testing::TestModel(), {}, {}, 0};
  const size_t per_state =
      kvstate::testing::MakeTestState(w.ns, w.model, shape, 1)->manifest.total_page_bytes();
  const size_t n = std::max<size_t>(1, (c.put_mib << 20) / per_state);
  ProgressBar gen("generating states", n + c.clients);
  for (size_t i = 0; i < n + c.clients; ++i) {
    (i < n ? w.states : w.warmup)
        .push_back(*kvstate::testing::MakeTestState(w.ns, w.model, shape, i + 1));
    gen.Update(i + 1);
  }
  gen.Done();
  w.total_bytes = n * per_state;
  return w;
}

// `lookup_clients` threads, one gRPC channel each, each looking up `lookups` token sequences:
// a stored state's tokens followed by unstored ones, kLookupTokens in all.
Percentiles LookupPhase(const Config& c, const ServiceProcess& node, const Workload& w,
                        int* errors) {
  std::vector<std::vector<double>> lat(c.lookup_clients);
  std::atomic<int> failed{0};
  std::atomic<int64_t> done{0};
  const int64_t total = int64_t{c.lookup_clients} * c.lookups;
  ProgressBar bar("lookup", total);
  std::vector<std::thread> threads;
  for (int t = 0; t < c.lookup_clients; ++t) {
    threads.emplace_back([&, t] {
      auto channel = ClientChannel(node.grpc_address());
      if (!channel.ok()) return void(failed.fetch_add(c.lookups));
      auto stub = v1::CacheNode::NewStub(*channel);
      std::mt19937_64 rng(t + 1);
      for (int i = 0; i < c.lookups; ++i, done.fetch_add(1)) {
        const TestState& s = w.states[rng() % w.states.size()];
        v1::CacheLookupRequest req;
        req.set_namespace_key(cache_client::BytesOf(w.ns));
        req.mutable_tokens()->Add(s.tokens.begin(), s.tokens.end());
        while (static_cast<size_t>(req.tokens_size()) < kLookupTokens) {
          req.add_tokens(rng() % 49152);
        }
        v1::CacheLookupResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        const absl::Time t0 = absl::Now();
        grpc::Status st = stub->Lookup(&ctx, req, &resp);
        lat[t].push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        if (!st.ok() || !resp.found() || resp.token_count() != s.tokens.size()) failed.fetch_add(1);
      }
    });
  }
  while (done.load() < total) {
    bar.Update(done.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& th : threads) th.join();
  bar.Done();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  *errors = failed.load();
  return Summarise(std::move(all));
}

struct Results {
  double put_s = 0, warm_s = 0, cold_s = 0, warm_single_s = 0;
  Percentiles lookup;
  int lookup_errors = 0;
  absl::StatusOr<double> transport_gbs = absl::UnknownError("not run");
  absl::StatusOr<std::map<std::string, DbBenchRow>> db_bench = absl::UnknownError("not run");
};

// RocksDB replays the WAL at start, flushes and compacts: wait (at most 30 s) until /metrics
// shows no background job and no pending compaction, so gets are not measured against them.
void WaitForQuietStore(const ServiceProcess& node) {
  const absl::Time start = absl::Now();
  const std::regex jobs(R"(glimpse_cache_node_rocksdb_background_jobs ([0-9.e+]+))");
  const std::regex pending(R"(glimpse_cache_node_rocksdb_pending_compaction_bytes ([0-9.e+]+))");
  while (absl::Now() - start < absl::Seconds(30)) {
    absl::StatusOr<std::string> m = HttpGet("127.0.0.1", node.metrics_port(), "/metrics");
    std::smatch a, b;
    if (m.ok() && std::regex_search(*m, a, jobs) && std::regex_search(*m, b, pending) &&
        std::stod(a[1]) == 0 && std::stod(b[1]) == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("store quiet after %.1f s\n", absl::ToDoubleSeconds(absl::Now() - start));
  std::fflush(stdout);
}

// Put on a node with a 1 GiB warm tier; then, on the same directory after a restart, one cold
// pass of gets (RocksDB, admitting into the warm tier), one warm pass, and the lookups. One
// CacheClient (--client_engines UCX engines) per node process, kept across its phases as a
// worker keeps its own.
absl::Status RunNodePhases(const Config& c, const Workload& w, Results* r) {
  const std::string db = c.dir + "/node_db";
  std::filesystem::remove_all(db);
  ASSIGN_OR_RETURN(ServiceProcess node, StartNode(c, db, "1GiB"));
  std::unique_ptr<cache_client::CacheClient> client = NewClient(node, c.client_engines);
  if (!client) return absl::UnavailableError("cannot create a cache client");
  ASSIGN_OR_RETURN(
      r->put_s,
      RunPhase(
          "put", *client, c.clients, w.states.size(),
          [&](cache_client::CacheClient& cl, int t) {
            return cl.Put(w.warmup[t].manifest, w.warmup[t].tokens, w.warmup[t].spans()).status();
          },
          [&](cache_client::CacheClient& cl, size_t i) {
            return cl.Put(w.states[i].manifest, w.states[i].tokens, w.states[i].spans()).status();
          }));
  std::vector<size_t> order(w.states.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  const auto warmup = [&](cache_client::CacheClient& cl, int t) {
    return cl.Get(w.warmup[t].manifest.namespace_key, w.warmup[t].manifest.state_key, w.model)
        .status();
  };
  const auto check = [&](const cache_client::State& got, const TestState& s, bool want_warm) {
    if (got.pages.size() != s.pages.size()) return absl::DataLossError("short get");
    if (got.warm_hit != want_warm) return absl::InternalError("unexpected warm-tier result");
    return absl::OkStatus();
  };
  // Request i gets states order[i·batch, (i + 1)·batch).
  const size_t batch = static_cast<size_t>(c.get_batch);
  const size_t requests = (w.states.size() + batch - 1) / batch;
  const auto get = [&](bool want_warm) {
    return [&, want_warm](cache_client::CacheClient& cl, size_t i) -> absl::Status {
      if (batch == 1) {
        const TestState& s = w.states[order[i]];
        ASSIGN_OR_RETURN(cache_client::State got,
                         cl.Get(s.manifest.namespace_key, s.manifest.state_key, w.model));
        return check(got, s, want_warm);
      }
      std::vector<cache_client::GetSpec> specs;
      for (size_t k = i * batch; k < std::min(w.states.size(), (i + 1) * batch); ++k) {
        const kvstate::Manifest& m = w.states[order[k]].manifest;
        specs.push_back({m.namespace_key, m.state_key, w.model, {}});
      }
      ASSIGN_OR_RETURN(std::vector<cache_client::State> got, cl.GetMany(specs));
      for (size_t k = 0; k < got.size(); ++k) {
        RETURN_IF_ERROR(check(got[k], w.states[order[i * batch + k]], want_warm));
      }
      return absl::OkStatus();
    };
  };
  // Restarted (an empty warm tier; RocksDB recovers the WAL and settles): every first get reads
  // RocksDB and admits the state; the second pass is served from memory.
  client.reset();
  (void)node.Terminate();
  ASSIGN_OR_RETURN(node, StartNode(c, db, "1GiB"));
  WaitForQuietStore(node);
  client = NewClient(node, c.client_engines);
  if (!client) return absl::UnavailableError("cannot create a cache client");
  ASSIGN_OR_RETURN(r->cold_s,
                   RunPhase("get (cold)", *client, c.clients, requests, warmup, get(false)));
  ASSIGN_OR_RETURN(r->warm_s,
                   RunPhase("get (warm)", *client, c.clients, requests, warmup, get(true)));
  ASSIGN_OR_RETURN(r->warm_single_s,
                   RunPhase("get (warm, one state per Get)", *client, c.clients, w.states.size(),
                            warmup, [&](cache_client::CacheClient& cl, size_t i) -> absl::Status {
                              const TestState& s = w.states[order[i]];
                              ASSIGN_OR_RETURN(
                                  cache_client::State got,
                                  cl.Get(s.manifest.namespace_key, s.manifest.state_key, w.model));
                              return check(got, s, true);
                            }));
  r->lookup = LookupPhase(c, node, w, &r->lookup_errors);
  (void)node.Terminate();
  std::filesystem::remove_all(db);
  return absl::OkStatus();
}

void Report(const Config& c, const Workload& w, const Results& r) {
  const size_t pages = w.states.size() * c.pages;
  const auto gbs = [&](double secs) { return w.total_bytes / secs / 1e9; };
  std::printf("\n%-30s %10s %12s %10s\n", "", "GB/s", "pages/s", "states/s");
  const auto row = [&](const char* name, double secs) {
    std::printf("%-30s %10.3f %12.0f %10.1f\n", name, gbs(secs), pages / secs,
                w.states.size() / secs);
  };
  row("cache node put", r.put_s);
  row("cache node get (cold)", r.cold_s);
  row("cache node get (warm)", r.warm_s);
  row("cache node get (warm, 1/Get)", r.warm_single_s);
  const auto phase = [&](double secs) {
    return nlohmann::json{
        {"gb_per_s", gbs(secs)}, {"pages_per_s", pages / secs}, {"seconds", secs}};
  };
  nlohmann::json j = {{"states", w.states.size()},
                      {"pages_per_state", c.pages},
                      {"page_bytes", w.states[0].pages[0].size()},
                      {"clients", c.clients},
                      {"client_engines", c.client_engines},
                      {"sync_every_put", c.sync},
                      {"ucx_tls", std::getenv("UCX_TLS")},
                      {"put", phase(r.put_s)},
                      {"get_cold", phase(r.cold_s)},
                      {"get_batch", c.get_batch},
                      {"get_warm", phase(r.warm_s)},
                      {"get_warm_one_per_get", phase(r.warm_single_s)},
                      {"lookup",
                       {{"clients", c.lookup_clients},
                        {"tokens", kLookupTokens},
                        {"count", c.lookup_clients * c.lookups},
                        {"errors", r.lookup_errors},
                        {"p50_us", r.lookup.p50_us},
                        {"p99_us", r.lookup.p99_us},
                        {"mean_us", r.lookup.mean_us}}}};
  if (r.transport_gbs.ok()) {
    std::printf("%-30s %10.3f\n", "UCX transport alone", *r.transport_gbs);
    j["transport_gb_per_s"] = *r.transport_gbs;
  }
  if (r.db_bench.ok()) {
    const auto gb = [](const DbBenchRow& row) { return row.mib_per_sec * 1048576 / 1e9; };
    const DbBenchRow& f = r.db_bench->at("fillrandom");
    const DbBenchRow& g = r.db_bench->at("readrandom");
    const DbBenchRow& g2 = r.db_bench->at("readrandom#2");
    std::printf("%-30s %10.3f %12.0f\n", "db_bench fillrandom", gb(f), f.ops_per_sec);
    std::printf("%-30s %10.3f %12.0f\n", "db_bench readrandom (cold)", gb(g), g.ops_per_sec);
    std::printf("%-30s %10.3f %12.0f\n", "db_bench readrandom (warm)", gb(g2), g2.ops_per_sec);
    std::printf("ratio put / fillrandom         %9.2fx (goal >= 0.7x)\n", gbs(r.put_s) / gb(f));
    std::printf("ratio get (cold) / readrandom  %9.2fx (goal >= 0.7x)\n", gbs(r.cold_s) / gb(g));
    std::printf("ratio get (warm) / readrandom  %9.2fx (goal >= 0.7x)\n", gbs(r.warm_s) / gb(g2));
    std::printf("ratio get (warm, 1/Get) / readrandom %3.2fx\n", gbs(r.warm_single_s) / gb(g2));
    j["db_bench"] = {
        {"fillrandom_gb_per_s", gb(f)},       {"fillrandom_ops_per_s", f.ops_per_sec},
        {"readrandom_cold_gb_per_s", gb(g)},  {"readrandom_cold_ops_per_s", g.ops_per_sec},
        {"readrandom_warm_gb_per_s", gb(g2)}, {"readrandom_warm_ops_per_s", g2.ops_per_sec}};
    j["ratio"] = {{"put", gbs(r.put_s) / gb(f)},
                  {"get_cold", gbs(r.cold_s) / gb(g)},
                  {"get_warm", gbs(r.warm_s) / gb(g2)},
                  {"get_warm_one_per_get", gbs(r.warm_single_s) / gb(g2)}};
  } else {
    std::printf("db_bench: %s\n", r.db_bench.status().ToString().c_str());
  }
  if (r.transport_gbs.ok()) {
    std::printf("ratio get (cold) / transport  %9.2fx\n", gbs(r.cold_s) / *r.transport_gbs);
    std::printf("ratio get (warm) / transport  %9.2fx\n", gbs(r.warm_s) / *r.transport_gbs);
  }
  std::printf(
      "lookup (%d clients, %zu tokens): p50 %.0f us, p99 %.0f us, mean %.0f us, %d errors\n",
      c.lookup_clients, kLookupTokens, r.lookup.p50_us, r.lookup.p99_us, r.lookup.mean_us,
      r.lookup_errors);
  j["rounds"] = c.rounds;
  std::ofstream(c.json) << j.dump(2) << "\n";
  std::printf("json: %s\n", c.json.c_str());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Field by field (a failed transport or db_bench run in any round fails that field).
Results MedianOf(const std::vector<Results>& rounds) {
  const auto med = [&](auto get) {
    std::vector<double> v;
    for (const Results& r : rounds) v.push_back(get(r));
    return Median(std::move(v));
  };
  Results m;
  m.put_s = med([](const Results& r) { return r.put_s; });
  m.warm_s = med([](const Results& r) { return r.warm_s; });
  m.cold_s = med([](const Results& r) { return r.cold_s; });
  m.warm_single_s = med([](const Results& r) { return r.warm_single_s; });
  m.lookup.p50_us = med([](const Results& r) { return r.lookup.p50_us; });
  m.lookup.p99_us = med([](const Results& r) { return r.lookup.p99_us; });
  m.lookup.mean_us = med([](const Results& r) { return r.lookup.mean_us; });
  for (const Results& r : rounds) m.lookup_errors += r.lookup_errors;
  bool transport_ok = true, db_ok = true;
  for (const Results& r : rounds) {
    transport_ok = transport_ok && r.transport_gbs.ok();
    db_ok = db_ok && r.db_bench.ok();
  }
  if (transport_ok) m.transport_gbs = med([](const Results& r) { return *r.transport_gbs; });
  if (db_ok) {
    std::map<std::string, DbBenchRow> rows;
    for (const char* name : {"fillrandom", "readrandom", "readrandom#2"}) {
      DbBenchRow& row = rows[name];
      row.ops_per_sec = med([&](const Results& r) { return r.db_bench->at(name).ops_per_sec; });
      row.mib_per_sec = med([&](const Results& r) { return r.db_bench->at(name).mib_per_sec; });
      row.micros_per_op = med([&](const Results& r) { return r.db_bench->at(name).micros_per_op; });
    }
    m.db_bench = rows;
  }
  return m;
}

int Run(const Config& c) {
  if (std::getenv("UCX_TLS") == nullptr) setenv("UCX_TLS", "posix,sysv,cma,tcp,self", 1);
  if (std::getenv("UCX_NET_DEVICES") == nullptr) setenv("UCX_NET_DEVICES", "lo", 1);
  std::filesystem::create_directories(c.dir);
  const Workload w = MakeWorkload(c);
  std::printf(
      "%zu states × %d pages of %zu bytes = %.1f MiB; %d client threads; "
      "sync_every_put=%s; UCX_TLS=%s; dir %s\n",
      w.states.size(), c.pages, w.states[0].pages[0].size(), w.total_bytes / 1048576.0, c.clients,
      c.sync ? "true" : "false", std::getenv("UCX_TLS"), c.dir.c_str());
  std::fflush(stdout);
  // Rounds alternate the node and db_bench, so both see the same background load; every figure
  // reported is the median over rounds.
  std::vector<Results> rounds(c.rounds);
  for (int i = 0; i < c.rounds; ++i) {
    std::printf("round %d of %d\n", i + 1, c.rounds);
    std::fflush(stdout);
    Results& r = rounds[i];
    if (absl::Status s = RunNodePhases(c, w, &r); !s.ok()) {
      std::fprintf(stderr, "cache node phases failed: %s (node log: %s/node.log)\n",
                   s.ToString().c_str(), c.dir.c_str());
      return 1;
    }
    r.transport_gbs = TransportCeiling(w.states, c.clients);
    r.db_bench = RunDbBench(c, w.states.size() * c.pages);
    if (!r.db_bench.ok()) std::printf("db_bench: %s\n", r.db_bench.status().ToString().c_str());
    const auto gbs = [&](double secs) { return w.total_bytes / secs / 1e9; };
    std::printf(
        "round %d: put %.3f GB/s, get cold %.3f, warm %.3f, warm 1/Get %.3f, transport %.3f", i + 1,
        gbs(r.put_s), gbs(r.cold_s), gbs(r.warm_s), gbs(r.warm_single_s),
        r.transport_gbs.ok() ? *r.transport_gbs : 0.0);
    if (r.db_bench.ok()) {
      std::printf("; db_bench fillrandom %.3f, readrandom cold %.3f, warm %.3f",
                  r.db_bench->at("fillrandom").mib_per_sec * 1048576 / 1e9,
                  r.db_bench->at("readrandom").mib_per_sec * 1048576 / 1e9,
                  r.db_bench->at("readrandom#2").mib_per_sec * 1048576 / 1e9);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  const Results r = MedianOf(rounds);
  Report(c, w, r);
  return r.lookup_errors == 0 && r.db_bench.ok() ? 0 : 1;
}

}  // namespace
}  // namespace glimpse::cache_node

int main(int argc, char** argv) {
  glimpse::cache_node::Config c;
  for (int i = 1; i < argc; ++i) {
    if (!glimpse::cache_node::ParseFlag(argv[i], &c)) {
      std::fprintf(stderr,
                   "usage: %s [--put_mib=256] [--clients=4] [--pages=16] [--lookup_clients=16] "
                   "[--lookups=500] [--rounds=3] [--get_batch=8] [--sync=true] [--dir=DIR] "
                   "[--db_bench=PATH] "
                   "[--json=FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  return glimpse::cache_node::Run(c);
}
