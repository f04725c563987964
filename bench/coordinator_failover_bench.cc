// glimpse_bench_coordinator_failover: how long turns cannot be routed when the leading
// coordinator goes, as a client sees it. Two real glimpse-coordinator processes on a local etcd
// member (Debian's etcd-server); a client given both addresses (core/cluster/coordinators.h)
// routes and ends turns in a loop. Each trial SIGKILLs the leader (a machine dying), or SIGTERMs
// it (a rolling update: it resigns), and times from the signal to the first turn routed and
// ended again (a leader shut down drains its calls meanwhile); the stopped one is restarted as a
// follower. Prints the median, p90 and worst
// against the bound the election promises for a death, election.ttl + election.poll.
//
//   glimpse_bench_coordinator_failover [--trials=N] [--ttl=5s] [--poll=500ms] [--keep]
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/flags.h"
#include "core/cluster/coordinators.h"
#include "core/common/grpc/server.h"
#include "core/common/progress.h"
#include "core/common/service_process.h"
#include "core/common/status_macros.h"
#include "core/etcd/etcd_process.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse {
namespace {

struct Flags {
  int trials = 10;
  absl::Duration ttl = absl::Seconds(5);
  absl::Duration poll = absl::Milliseconds(500);
  bool keep = false;  // the coordinators' and etcd's logs
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    if (a == "--keep") {
      f->keep = true;
    } else if (bench::FlagValue(a, "trials", &v)) {
      if (!absl::SimpleAtoi(v, &f->trials) || f->trials < 1) return false;
    } else if (bench::FlagValue(a, "ttl", &v)) {
      if (!absl::ParseDuration(v, &f->ttl)) return false;
    } else if (bench::FlagValue(a, "poll", &v)) {
      if (!absl::ParseDuration(v, &f->poll)) return false;
    } else {
      return false;
    }
  }
  return true;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return ctx;
}

class Bench {
 public:
  Bench(const Flags& flags, std::filesystem::path dir) : flags_(flags), dir_(std::move(dir)) {}

  absl::Status Setup() {
    ASSIGN_OR_RETURN(etcd_, etcd::EtcdProcess::Start((dir_ / "etcd").string()));
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(const int port, FreeLoopbackPort());
      ports_.push_back(port);  // a restarted coordinator keeps its address
      ASSIGN_OR_RETURN(ServiceProcess p, StartCoordinator(i));
      coordinators_.push_back(std::move(p));
      if (i == 0) RETURN_IF_ERROR(AwaitLeader().status());
    }
    std::vector<std::string> addresses;
    for (const ServiceProcess& p : coordinators_) addresses.push_back(p.grpc_address());
    ASSIGN_OR_RETURN(client_, cluster::Coordinators::Connect(addresses, {}));
    v1::RegisterNodeRequest req;
    req.set_node_id("d1");
    req.set_role(v1::NODE_ROLE_DECODE);
    req.set_grpc_address("127.0.0.1:7001");
    req.set_capacity_bytes(int64_t{1} << 40);
    req.set_incarnation("bench");
    v1::RegisterNodeResponse resp;
    return FromGrpc(client_->Call(
        Context, [&](auto& stub, auto* ctx) { return stub.RegisterNode(ctx, req, &resp); }));
  }

  // One trial: the time from `signal` to the leader to the next turn routed and ended.
  absl::StatusOr<absl::Duration> Trial(int signal) {
    ASSIGN_OR_RETURN(const size_t leader, AwaitLeader());
    RETURN_IF_ERROR(Turn());  // the client talks to the leader before it goes
    const absl::Time sent = absl::Now();
    // A shut-down leader drains its calls for up to shutdown_grace meanwhile: turns go on.
    absl::Status stopped;
    std::thread stopping;
    if (signal == SIGKILL) {
      coordinators_[leader].Kill();
    } else {
      stopping = std::thread([&] { stopped = coordinators_[leader].Terminate().status(); });
    }
    const absl::Time give_up = sent + absl::Seconds(60);
    absl::Status st;
    while (!(st = Turn()).ok() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    const absl::Duration out = absl::Now() - sent;
    if (stopping.joinable()) stopping.join();
    RETURN_IF_ERROR(st);
    RETURN_IF_ERROR(stopped);
    ASSIGN_OR_RETURN(coordinators_[leader], StartCoordinator(static_cast<int>(leader)));
    return out;
  }

 private:
  absl::StatusOr<ServiceProcess> StartCoordinator(int i) {
    return ServiceProcess::Start(
        GLIMPSE_COORDINATOR_BINARY,
        {absl::StrCat("--listen=127.0.0.1:", ports_[i]),
         "--store.etcd_endpoints=" + etcd_->endpoint(),
         absl::StrCat("--election.ttl=", absl::FormatDuration(flags_.ttl)),
         absl::StrCat("--election.poll=", absl::FormatDuration(flags_.poll)),
         "--lease.default_ttl=1h", "--membership.heartbeat_interval=1h", "--shutdown_grace=1s"},
        // A log of its own per start: ServiceProcess reads the port from its "serving" line.
        (dir_ / absl::StrCat("coordinator-", i, "-", ++starts_, ".log")).string());
  }

  // The index of the coordinator that leads, once one does.
  absl::StatusOr<size_t> AwaitLeader() {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      for (size_t i = 0; i < coordinators_.size(); ++i) {
        auto stub =
            v1::Coordinator::NewStub(ClientChannel(coordinators_[i].grpc_address()).value());
        grpc::ClientContext ctx;
        v1::StatsResponse resp;
        if (stub->Stats(&ctx, v1::StatsRequest(), &resp).ok()) return i;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::DeadlineExceededError("no coordinator leads");
  }

  absl::Status Turn() {
    const std::string session = absl::StrCat("s", ++turns_);
    v1::RouteTurnRequest route;
    route.set_session_id(session);
    route.set_tenant("bench");
    route.set_new_tokens(100);
    route.set_max_output_tokens(10);
    v1::RouteTurnResponse routed;
    RETURN_IF_ERROR(FromGrpc(client_->Call(
        Context, [&](auto& stub, auto* ctx) { return stub.RouteTurn(ctx, route, &routed); })));
    v1::EndTurnRequest end;
    end.set_session_id(session);
    end.set_kv_tokens(110);
    v1::EndTurnResponse lease;
    return FromGrpc(client_->Call(
        Context, [&](auto& stub, auto* ctx) { return stub.EndTurn(ctx, end, &lease); }));
  }

  static absl::Status FromGrpc(const grpc::Status& st) {
    return st.ok()
               ? absl::OkStatus()
               : absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
  }

  const Flags flags_;
  const std::filesystem::path dir_;
  std::unique_ptr<etcd::EtcdProcess> etcd_;
  std::vector<int> ports_;
  std::vector<ServiceProcess> coordinators_;
  std::unique_ptr<cluster::Coordinators> client_;
  int64_t turns_ = 0;
  int starts_ = 0;
};

void Report(const char* what, std::vector<absl::Duration> times, absl::Duration bound) {
  std::sort(times.begin(), times.end());
  auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
  const absl::Duration median = times[times.size() / 2];
  const absl::Duration p90 = times[std::min(times.size() - 1, times.size() * 9 / 10)];
  std::printf("%-34s %6zu %10.0f %10.0f %10.0f %8.2f\n", what, times.size(), ms(median), ms(p90),
              ms(times.back()), ms(median) / ms(bound));
}

int Run(const Flags& flags) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("glimpse-failover-bench-", getpid());
  std::filesystem::remove_all(dir);
  Bench bench(flags, dir);
  if (absl::Status st = bench.Setup(); !st.ok()) {
    std::fprintf(stderr, "setup: %s (logs in %s)\n", st.ToString().c_str(), dir.c_str());
    return 1;
  }
  std::vector<absl::Duration> killed, terminated;
  ProgressBar progress("failover trials", 2 * flags.trials);
  for (int t = 0; t < flags.trials; ++t) {
    for (int signal : {SIGKILL, SIGTERM}) {
      absl::StatusOr<absl::Duration> d = bench.Trial(signal);
      if (!d.ok()) {
        std::fprintf(stderr, "trial %d: %s (logs in %s)\n", t, d.status().ToString().c_str(),
                     dir.c_str());
        return 1;
      }
      (signal == SIGKILL ? killed : terminated).push_back(*d);
      std::fprintf(stderr, "trial %d %s: %.0f ms\n", t, signal == SIGKILL ? "SIGKILL" : "SIGTERM",
                   absl::ToDoubleMilliseconds(*d));
      progress.Update(static_cast<int64_t>(killed.size() + terminated.size()));
    }
  }
  progress.Done();
  const absl::Duration bound = flags.ttl + flags.poll;
  std::printf(
      "coordinator failover, election.ttl=%s election.poll=%s, turns routed and ended "
      "by a client given both coordinators\n",
      absl::FormatDuration(flags.ttl).c_str(), absl::FormatDuration(flags.poll).c_str());
  std::printf("%-34s %6s %10s %10s %10s %8s\n", "leader", "trials", "median ms", "p90 ms",
              "worst ms", "/bound");
  Report("SIGKILL (dies; lease expires)", killed, bound);
  Report("SIGTERM (shuts down; resigns)", terminated, bound);
  std::printf("bound: ttl + poll = %.0f ms\n", absl::ToDoubleMilliseconds(bound));
  if (flags.keep) {
    std::printf("logs: %s\n", dir.c_str());
  } else {
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace
}  // namespace glimpse

int main(int argc, char** argv) {
  glimpse::Flags flags;
  if (!glimpse::ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr, "usage: %s [--trials=N] [--ttl=5s] [--poll=500ms] [--keep]\n", argv[0]);
    return 2;
  }
  return glimpse::Run(flags);
}
