// glimpse_bench_transport: UcxTransport throughput between two processes on one host, beside
// ucx_perftest (tag_bw) run with the same UCX_TLS, error handling and message sizes in the same
// run. The UCX settings our engine changes by default (UcxDefaultSettings) are exported to the
// environment first, so ucx_perftest runs with them too.
//
// Transport sets: shm = posix,sysv,cma,self; tcp = tcp,self with peer failure detection (our
// endpoints use UCP_ERR_HANDLING_MODE_PEER and ucx_perftest gets -e, so both pick the same UCX
// lanes), as between hosts; shm+tcp = posix,sysv,cma,tcp,self, what the services run with. In shm
// and shm+tcp our two engines share a host, so their endpoint is a shared-memory one without UCX
// error handling (UcxOptions::local_shared_memory), and ucx_perftest runs without -e. (With peer
// error handling UCX 1.13 would move shm+tcp's bulk data over TCP: it wants
// UCT_MD_FLAG_INVALIDATE_RMA for a rendezvous lane, which CMA lacks.)
//
// For each set and page size (64 KiB, 256 KiB, 1 MiB, 4 MiB) this process sends --total_mib MiB to
// a glimpse_transport_peer child ("recv" mode), after a warm-up of 1/8 of that, in batches of up
// to --pages pages with --inflight_mib MiB in flight (about four batches, at least two, so that
// some move while the next is submitted: 64 KiB 16 x 8 pages, 256 KiB 4 x 8, 1 MiB 4 x 2, 4 MiB
// 2 x 1 at the default 8 MiB); a rate is payload bytes / (first Submit .. last Wait). Then it runs
// an ucx_perftest server and client (127.0.0.1, a free port, -n iterations moving the same bytes,
// -w 1/8 of them) and takes the client's final "overall" bandwidth. Both are sender-side
// completion times; GB/s are 1e9 bytes/s (ucx_perftest's MB/s are MiB/s and are converted).
// Why 8 MiB in flight: the receiver lands every page in its own pooled buffer (last in, first
// out), so what is in flight is the receiving side's working set; at 32 MiB (L3 here) and more
// it spills to memory (1 MiB pages: 0.72-0.75x of ucx_perftest at 32 MiB against 0.75-0.87x at
// 8 MiB, shm and tcp alike, 2026-11-22).
//
// Three runs of ours per row:
//   "ours": every page of every batch is the same page-sized send buffer, as in ucx_perftest (the
//           receiver still lands each page in its own pooled buffer, as the contract requires),
//           sent as the services send pages: without the transport's batch CRC32C
//           (SubmitOptions::checksum off; pages carry their own, which their receivers check).
//           The ratio and the 0.9x goal compare this with ucx_perftest.
//   "ours, batch CRC32C": the same with the batch CRC32C, as a batch of arbitrary bytes ships.
//   "ours, distinct pages": the pages cycle through 128 MiB of different send buffers, no batch
//           CRC. ucx_perftest re-sends one buffer into one buffer, both of which stay in cache
//           (L3 is 32 MiB here), while KV pages are many and mostly cold: this run is bound by
//           memory bandwidth (~6 GB/s on the dev VM), which ucx_perftest never meets.
// Each row runs the four --repeat times (default 3), interleaved, and shows medians: on a shared
// machine, load that comes and goes then hits ours and ucx_perftest alike. The JSON keeps every
// sample.
//
// Only loopback: UCX_NET_DEVICES=lo for us and every child. Every child is started through
// testing::Child (fork + exec), waited for with a deadline and SIGKILLed + reaped otherwise.
// Prints a table and writes all numbers as JSON (--json, default in the build dir).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/common/progress.h"
#include "core/common/service_process.h"
#include "core/common/status_macros.h"
#include "core/transport/testing/peer_util.h"
#include "core/transport/ucx/ucx_transport.h"
#include "nlohmann/json.hpp"

namespace glimpse::transport {
namespace {

using testing::Child;

struct Config {
  size_t total_bytes = size_t{256} << 20;
  size_t max_pages_per_batch = 8;
  size_t inflight_bytes = size_t{8} << 20;
  size_t repeat = 3;  // interleaved runs per row; the table shows medians
  std::string peer = GLIMPSE_TRANSPORT_PEER;
  std::string perftest = GLIMPSE_UCX_PERFTEST;
  std::string json = GLIMPSE_BENCH_JSON;
  std::string only_tls;  // "shm", "tcp" or "shm+tcp": run only that set (empty: all)
  size_t only_page = 0;  // run only this page size in bytes (0: all)
  bool skip_perftest = false;
};

struct TlsSet {
  const char* name;
  const char* tls;
  bool peer_error_handling;  // ours (UCP_ERR_HANDLING_MODE_PEER) and ucx_perftest (-e)
};
constexpr TlsSet kTlsSets[] = {{"shm", "posix,sysv,cma,self", false},
                               {"tcp", "tcp,self", true},
                               {"shm+tcp", "posix,sysv,cma,tcp,self", false}};
constexpr size_t kPageSizes[] = {size_t{64} << 10, size_t{256} << 10, size_t{1} << 20,
                                 size_t{4} << 20};
constexpr size_t kDistinctBytes = size_t{128} << 20;  // what "distinct pages" cycles through

// How one row ships: pages per batch and batches in flight.
struct Shape {
  size_t pages;
  size_t window;
};
Shape ShapeFor(const Config& cfg, size_t page_bytes) {
  const size_t inflight_pages = std::max<size_t>(2, cfg.inflight_bytes / page_bytes);
  const size_t pages = std::clamp<size_t>(inflight_pages / 4, 1, cfg.max_pages_per_batch);
  return {pages, std::max<size_t>(2, inflight_pages / pages)};
}

// What one run of ours sends.
struct Variant {
  const char* name;  // JSON key
  const char* title;
  bool distinct_pages;
  bool batch_crc;  // SubmitOptions::checksum
};
constexpr Variant kVariants[] = {{"ours", "ours", false, false},
                                 {"ours_batch_crc", "ours, batch CRC32C", false, true},
                                 {"ours_distinct_pages", "ours, distinct pages", true, false}};
constexpr size_t kPlain = 0, kBatchCrc = 1, kDistinct = 2;  // indices into kVariants

// One column of a row: the GB/s of --repeat interleaved runs (so that load from other processes
// hits every column alike) and their median; 0 if every run failed.
struct Series {
  std::vector<double> samples;
  std::string error;  // the first failure, if any
  double median = 0;
};

struct Result {
  std::string tls;
  size_t page_bytes = 0;
  Shape shape{};
  Series ours[std::size(kVariants)];  // in kVariants order
  Series perftest;
  double Ratio(size_t variant) const {
    return perftest.median > 0 ? ours[variant].median / perftest.median : 0;
  }
};

void SetTlsEnv(const TlsSet& set) {
  setenv("UCX_TLS", set.tls, 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
}

// Ships `batches` batches, taking the slots in turn, at most `window` in flight. Bounded by the
// transfers' deadlines.
absl::Status SendBatches(Transport& t, PeerId peer,
                         const std::vector<std::vector<std::span<const uint8_t>>>& slots,
                         size_t window, size_t batches, bool batch_crc) {
  std::deque<TransferId> inflight;
  for (size_t b = 0; b < batches; ++b) {
    if (inflight.size() == window) {
      RETURN_IF_ERROR(t.Wait(inflight.front(), absl::Now() + absl::Seconds(30)));
      inflight.pop_front();
    }
    SubmitOptions so;
    so.deadline = absl::Now() + absl::Seconds(30);
    so.checksum = batch_crc;
    ASSIGN_OR_RETURN(TransferId id, t.Submit(peer, slots[b % slots.size()], so));
    inflight.push_back(id);
  }
  for (TransferId id : inflight) RETURN_IF_ERROR(t.Wait(id, absl::Now() + absl::Seconds(30)));
  return absl::OkStatus();
}

// Send pages start on a page boundary, as ucx_perftest's buffers (mapped by UCX) do. A vector's
// bytes start 16 bytes into a page, and the kernel's copy out of such a buffer cost our sender
// 10-20 % more per byte than ucx_perftest's (tcp, 1 MiB pages, perf samples in _copy_from_iter).
using FreedBytes = std::unique_ptr<uint8_t, decltype(&std::free)>;
absl::StatusOr<FreedBytes> PageAlignedBytes(size_t size) {
  void* p = nullptr;
  if (posix_memalign(&p, static_cast<size_t>(sysconf(_SC_PAGESIZE)), size) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes"));
  }
  return FreedBytes(static_cast<uint8_t*>(p), &std::free);
}

// Our transport: this process sends, a glimpse_transport_peer child receives. Returns seconds.
absl::StatusOr<double> RunOurs(const Config& cfg, const TlsSet& set, size_t page_bytes,
                               const Variant& variant) {
  ASSIGN_OR_RETURN(Child child, Child::Start({cfg.peer, "recv", "120"}));
  ASSIGN_OR_RETURN(std::string line, child.ReadLine(absl::Now() + absl::Seconds(20), {"ADDR "}));
  const std::string address = testing::FromHex(line.substr(5));
  double seconds = 0;
  {  // The sender engine goes before the child is killed: a shared-memory endpoint would not learn
     // of the death, and the engine's shutdown would wait for the dead peer.
    ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, CreateUcxTransport());
    ASSIGN_OR_RETURN(PeerId peer, t->Connect(address));
    const Shape shape = ShapeFor(cfg, page_bytes);
    const size_t pages =
        variant.distinct_pages ? std::max<size_t>(1, kDistinctBytes / page_bytes) : 1;
    ASSIGN_OR_RETURN(FreedBytes arena_bytes, PageAlignedBytes(pages * page_bytes));
    std::span<uint8_t> arena(arena_bytes.get(), pages * page_bytes);  // [pages][page_bytes]
    for (size_t i = 0; i < arena.size(); ++i) arena[i] = static_cast<uint8_t>(i * 131 + 7);
    ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                     t->RegisterMemory(arena.data(), arena.size()));
    // Batch s takes pages s * shape.pages onwards, so consecutive batches walk the arena.
    std::vector<std::vector<std::span<const uint8_t>>> slots(
        std::max<size_t>(shape.window, pages / shape.pages));
    for (size_t s = 0; s < slots.size(); ++s) {
      for (size_t p = 0; p < shape.pages; ++p) {
        const size_t page = (s * shape.pages + p) % pages;
        slots[s].emplace_back(arena.data() + page * page_bytes, page_bytes);
      }
    }
    const size_t batches = std::max<size_t>(1, cfg.total_bytes / (page_bytes * shape.pages));
    // Warm-up: wireup, and the receiver's pool fills with a window's worth of buffers.
    RETURN_IF_ERROR(SendBatches(*t, peer, slots, shape.window,
                                std::max(2 * shape.window, batches / 8), variant.batch_crc));
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(SendBatches(*t, peer, slots, shape.window, batches, variant.batch_crc));
    seconds = absl::ToDoubleSeconds(absl::Now() - start);
    (void)t->Disconnect(peer);
  }
  child.Kill();
  return seconds;
}

// True once some socket listens on `port` (per /proc/net/tcp{,6}), without connecting to it: the
// ucx_perftest server takes its first connection as the client.
bool Listening(int port) {
  const std::string want = absl::StrFormat(":%04X", port);  // local_address is HEXIP:HEXPORT
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    std::string row;
    while (std::getline(in, row)) {
      std::vector<std::string> f = absl::StrSplit(row, ' ', absl::SkipEmpty());
      if (f.size() > 3 && absl::EndsWith(f[1], want) && f[3] == "0A") {
        return true;
      }
    }
  }
  return false;
}

// All stdout lines until the child closes it (or the deadline).
std::vector<std::string> ReadAll(Child& c, absl::Time deadline) {
  std::vector<std::string> lines;
  for (;;) {
    absl::StatusOr<std::string> l = c.ReadLine(deadline, {""});
    if (!l.ok()) return lines;
    lines.push_back(*l);
  }
}

// The client's final row: "<iters> <p50> <avg> <overall> <bw avg> <bw overall> <rate> <rate>".
absl::StatusOr<double> ParsePerftestMiBps(const std::vector<std::string>& lines) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::vector<std::string> f = absl::StrSplit(*it, ' ', absl::SkipEmpty());
    double v[8];
    if (f.size() != 7 && f.size() != 8) continue;
    bool numeric = true;
    for (size_t i = 0; i < f.size() && numeric; ++i) numeric = absl::SimpleAtod(f[i], &v[i]);
    if (numeric) return v[f.size() - 3];  // bandwidth, overall
  }
  return absl::InternalError("no final result row in ucx_perftest output");
}

// ucx_perftest tag_bw with the same UCX_TLS and error handling (-e: peer failure detection, as
// our endpoints have it). Returns GB/s (1e9).
absl::StatusOr<double> RunPerftest(const Config& cfg, const TlsSet& set, size_t page_bytes) {
  ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
  const size_t iters = std::max<size_t>(1, cfg.total_bytes / page_bytes);
  std::vector<std::string> server_args = {cfg.perftest, "-p", absl::StrCat(port)};
  std::vector<std::string> client_args = {
      cfg.perftest, "127.0.0.1",
      "-p",         absl::StrCat(port),
      "-t",         "tag_bw",
      "-s",         absl::StrCat(page_bytes),
      "-n",         absl::StrCat(iters),
      "-w",         absl::StrCat(std::max<size_t>(8, iters / 8)),
      "-f"};
  if (set.peer_error_handling) {
    server_args.push_back("-e");
    client_args.push_back("-e");
  }
  ASSIGN_OR_RETURN(Child server, Child::Start(server_args));
  const absl::Time listen_by = absl::Now() + absl::Seconds(10);
  while (!Listening(port)) {
    if (absl::Now() > listen_by) return absl::DeadlineExceededError("ucx_perftest never listened");
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSIGN_OR_RETURN(Child client, Child::Start(client_args));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::vector<std::string> lines = ReadAll(client, deadline);
  ASSIGN_OR_RETURN(int rc, client.WaitExit(deadline));
  (void)ReadAll(server, absl::Now() + absl::Seconds(5));
  (void)server.WaitExit(absl::Now() + absl::Seconds(5));  // else killed by ~Child
  if (rc != 0) return absl::InternalError(absl::StrCat("ucx_perftest client exit code ", rc));
  ASSIGN_OR_RETURN(double mibps, ParsePerftestMiBps(lines));
  return mibps * 1048576.0 / 1e9;
}

std::string PageName(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? absl::StrCat(bytes >> 20, " MiB")
                                    : absl::StrCat(bytes >> 10, " KiB");
}

void PrintTable(const std::vector<Result>& results) {
  std::printf("\nmedians of interleaved runs\n%-7s %-9s %-14s %10s %18s %7s %26s %26s\n", "tls",
              "page", "in flight", "ours GB/s", "ucx_perftest GB/s", "ratio",
              "ours, batch CRC32C (ratio)", "ours, distinct pages GB/s");
  for (const Result& r : results) {
    const bool goal = r.page_bytes < (size_t{1} << 20) || r.Ratio(kPlain) >= 0.9;
    const std::string inflight = absl::StrCat(r.shape.window, " x ", r.shape.pages, " pages");
    std::printf("%-7s %-9s %-14s %10.2f %18.2f %6.2fx %18.2f (%.2fx) %26.2f%s\n", r.tls.c_str(),
                PageName(r.page_bytes).c_str(), inflight.c_str(), r.ours[kPlain].median,
                r.perftest.median, r.Ratio(kPlain), r.ours[kBatchCrc].median, r.Ratio(kBatchCrc),
                r.ours[kDistinct].median, goal ? "" : "  (< 0.9 goal)");
    for (size_t v = 0; v < std::size(kVariants); ++v) {
      if (!r.ours[v].error.empty()) {
        std::printf("      %s failed: %s\n", kVariants[v].title, r.ours[v].error.c_str());
      }
    }
    if (!r.perftest.error.empty())
      std::printf("      ucx_perftest failed: %s\n", r.perftest.error.c_str());
  }
}

nlohmann::json SeriesJson(const Series& s) {
  return {{"gbps", s.median}, {"samples_gbps", s.samples}, {"error", s.error}};
}

absl::Status WriteJson(const Config& cfg, const std::vector<Result>& results) {
  nlohmann::json j;
  j["total_bytes"] = cfg.total_bytes;
  j["max_pages_per_batch"] = cfg.max_pages_per_batch;
  j["inflight_bytes"] = cfg.inflight_bytes;
  j["repeat"] = cfg.repeat;
  j["units"] = "GB/s = 1e9 bytes/s, sender-side completion";
  for (const UcxSetting& d : UcxDefaultSettings()) j["ucx_settings"][d.env] = std::getenv(d.env);
  j["ours"] = "one page-sized send buffer re-sent, as ucx_perftest does; no batch CRC32C";
  j["ours_batch_crc"] = "the same with the transport's batch CRC32C";
  j["ours_distinct_pages"] = "pages cycle through 128 MiB of send buffers; no batch CRC32C";
  for (const Result& r : results) {
    nlohmann::json row = {{"tls", r.tls},
                          {"page_bytes", r.page_bytes},
                          {"batches_in_flight", r.shape.window},
                          {"pages_per_batch", r.shape.pages},
                          {"ucx_perftest", SeriesJson(r.perftest)},
                          {"ratio", r.Ratio(kPlain)},
                          {"ratio_batch_crc", r.Ratio(kBatchCrc)}};
    for (size_t v = 0; v < std::size(kVariants); ++v) {
      row[kVariants[v].name] = SeriesJson(r.ours[v]);
    }
    j["results"].push_back(std::move(row));
  }
  std::ofstream out(cfg.json);
  out << j.dump(2) << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", cfg.json));
  return absl::OkStatus();
}

absl::StatusOr<Config> ParseFlags(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    size_t n = 0;
    if (absl::ConsumePrefix(&a, "--total_mib=") && absl::SimpleAtoi(a, &n) && n > 0) {
      cfg.total_bytes = n << 20;
    } else if (absl::ConsumePrefix(&a, "--pages=") && absl::SimpleAtoi(a, &n) && n > 0 &&
               n <= kMaxBuffersPerBatch) {
      cfg.max_pages_per_batch = n;
    } else if (absl::ConsumePrefix(&a, "--repeat=") && absl::SimpleAtoi(a, &n) && n > 0) {
      cfg.repeat = n;
    } else if (absl::ConsumePrefix(&a, "--inflight_mib=") && absl::SimpleAtoi(a, &n) && n > 0) {
      cfg.inflight_bytes = n << 20;
    } else if (absl::ConsumePrefix(&a, "--json=")) {
      cfg.json = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--tls=") && (a == "shm" || a == "tcp" || a == "shm+tcp")) {
      cfg.only_tls = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--page_kib=") && absl::SimpleAtoi(a, &n) && n > 0) {
      cfg.only_page = n << 10;
    } else if (a == "--no_perftest") {
      cfg.skip_perftest = true;
    } else if (absl::ConsumePrefix(&a, "--perftest=")) {
      cfg.perftest = std::string(a);
    } else if (absl::ConsumePrefix(&a, "--peer=")) {  // e.g. another build's, to compare
      cfg.peer = std::string(a);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad flag '", argv[i],
          "'; flags: --total_mib=N --pages=N --inflight_mib=N --repeat=N --json=PATH "
          "--perftest=PATH --peer=PATH --tls=shm|tcp|shm+tcp --page_kib=N --no_perftest"));
    }
  }
  return cfg;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Adds one run's GB/s (or its first error) to a column.
void AddSample(const absl::StatusOr<double>& gbps, Series& s) {
  if (gbps.ok()) {
    s.samples.push_back(*gbps);
  } else if (s.error.empty()) {
    s.error = gbps.status().ToString();
  }
}

template <typename Tick>
Result RunRow(const Config& cfg, const TlsSet& set, size_t page, Tick tick) {
  Result r;
  r.tls = set.name;
  r.page_bytes = page;
  r.shape = ShapeFor(cfg, page);
  auto gbps = [&](absl::StatusOr<double> seconds) -> absl::StatusOr<double> {
    if (!seconds.ok()) return seconds.status();
    return *seconds > 0 ? cfg.total_bytes / *seconds / 1e9 : 0;
  };
  for (size_t i = 0; i < cfg.repeat; ++i) {
    for (size_t v = 0; v < std::size(kVariants); ++v) {
      AddSample(gbps(RunOurs(cfg, set, page, kVariants[v])), r.ours[v]);
      tick();
    }
    if (!cfg.skip_perftest) AddSample(RunPerftest(cfg, set, page), r.perftest);
    tick();
  }
  for (Series& s : r.ours) s.median = Median(s.samples);
  r.perftest.median = Median(r.perftest.samples);
  return r;
}

int Run(int argc, char** argv) {
  absl::StatusOr<Config> cfg = ParseFlags(argc, argv);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().ToString().c_str());
    return 2;
  }
  // Our engines apply these unless the environment sets them; through the environment,
  // ucx_perftest runs with the same UCX configuration.
  for (const UcxSetting& d : UcxDefaultSettings()) {
    setenv(d.env, d.value, /*overwrite=*/0);
    std::printf("UCX setting for ours and ucx_perftest: %s=%s\n", d.env, std::getenv(d.env));
  }
  std::vector<Result> results;
  ProgressBar bar("transport bench", std::size(kTlsSets) * std::size(kPageSizes) *
                                         (std::size(kVariants) + 1) * cfg->repeat);
  int64_t step = 0;
  for (const TlsSet& set : kTlsSets) {
    if (!cfg->only_tls.empty() && cfg->only_tls != set.name) continue;
    SetTlsEnv(set);
    for (size_t page : kPageSizes) {
      if (cfg->only_page != 0 && cfg->only_page != page) continue;
      results.push_back(RunRow(*cfg, set, page, [&] { bar.Update(++step); }));
    }
  }
  bar.Done();
  PrintTable(results);
  absl::Status js = WriteJson(*cfg, results);
  if (!js.ok())
    std::fprintf(stderr, "%s\n", js.ToString().c_str());
  else
    std::printf("\nJSON: %s\n", cfg->json.c_str());
  for (const Result& r : results) {
    if (!r.perftest.error.empty()) return 1;
    for (const Series& s : r.ours) {
      if (!s.error.empty()) return 1;
    }
  }
  return js.ok() ? 0 : 1;
}

}  // namespace
}  // namespace glimpse::transport

int main(int argc, char** argv) {
  // UCX logs to stdout by default, where it would mix with the peers' line protocol and our table;
  // libucs reads UCX_LOG_FILE when loaded, so set it and re-exec once (children inherit it).
  if (std::getenv("UCX_LOG_FILE") == nullptr) {
    setenv("UCX_LOG_FILE", "stderr", 1);
    setenv("UCX_LOG_LEVEL", "error", 0);
    execv("/proc/self/exe", argv);
    std::perror("re-exec with UCX_LOG_FILE=stderr failed; UCX may log to stdout");
  }
  return glimpse::transport::Run(argc, argv);
}
