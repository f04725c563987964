#include "tools/cli/local_cluster.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/grpc/server.h"
#include "core/common/status_macros.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse::cli {
namespace {

namespace fs = std::filesystem;

std::string SelfDir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

// Waits until the coordinator lists a live node of `role`.
absl::Status AwaitNode(const std::string& coordinator, v1::NodeRole role, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ClientChannel(coordinator));
  auto stub = v1::Coordinator::NewStub(channel);
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::ListNodesRequest req;
    req.set_role(role);
    v1::ListNodesResponse resp;
    if (stub->ListNodes(&ctx, req, &resp).ok() && resp.nodes_size() > 0) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("no ", v1::NodeRole_Name(role),
                                                  " node registered with the coordinator within ",
                                                  absl::FormatDuration(timeout)));
}

}  // namespace

std::string ServiceBinary(const std::string& bin_dir, const std::string& name) {
  if (!bin_dir.empty()) return (fs::path(bin_dir) / name).string();
  const fs::path self = SelfDir();
  if (fs::exists(self / name)) return (self / name).string();
  // Build tree: <build>/tools/cli/glimpse and <build>/<service-dir>/<binary>.
  const std::string folder = name.substr(std::string("glimpse-").size());
  return (self.parent_path().parent_path() / folder / name).string();
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const LocalClusterOptions& o) {
  const fs::path dir = o.dir;
  std::error_code ec;
  fs::create_directories(dir / "logs", ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->members_.reserve(5);  // start() hands out pointers into it
  auto start = [&](const std::string& name,
                   std::vector<std::string> args) -> absl::StatusOr<const ServiceProcess*> {
    const std::string binary = ServiceBinary(o.bin_dir, "glimpse-" + name);
    if (!fs::exists(binary)) {
      return absl::NotFoundError(absl::StrCat(binary, " not found (build it, or pass --bin-dir)"));
    }
    const std::string log = (dir / "logs" / (name + ".log")).string();
    absl::StatusOr<ServiceProcess> p = ServiceProcess::Start(binary, args, log, absl::Seconds(60));
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat(name, ": ", p.status().message(),
                                                          "\n--- ", log, " ---\n", Tail(log)));
    }
    cluster->members_.push_back({name, *std::move(p)});
    return &cluster->members_.back().process;
  };
  std::vector<std::string> coordinator_args = {"--store.path=" + (dir / "coordinator").string()};
  if (!o.lease_ttl.empty()) coordinator_args.push_back("--lease.fixed_ttl=" + o.lease_ttl);
  coordinator_args.push_back(
      absl::StrCat("--routing.prefill_on_decode_tokens=", o.prefill_on_decode_tokens));
  ASSIGN_OR_RETURN(const ServiceProcess* coordinator, start("coordinator", coordinator_args));
  const std::string coordinator_address = coordinator->grpc_address();
  ASSIGN_OR_RETURN(const ServiceProcess* cache,
                   start("cache-node", {"--storage.path=" + (dir / "cache-node").string(),
                                        "--storage.sync_every_put=false",
                                        "--coordinator=" + coordinator_address}));
  const std::string cache_address = cache->grpc_address();
  // Both workers run the model: the same flags.
  std::vector<std::string> worker = {"--coordinator=" + coordinator_address,
                                     "--cache_node=" + cache_address,
                                     absl::StrCat("--threads=", o.threads)};
  if (!o.model.empty()) worker.push_back("--model=" + o.model);
  if (!o.lookahead_module.empty()) worker.push_back("--lookahead_module=" + o.lookahead_module);
  if (!o.eviction_profile.empty()) worker.push_back("--eviction_profile=" + o.eviction_profile);
  RETURN_IF_ERROR(start("decode-worker", worker).status());
  if (o.prefill_worker) RETURN_IF_ERROR(start("prefill-worker", worker).status());
  std::vector<std::string> frontend = {
      "--coordinator=" + coordinator_address, "--policy.method=" + o.policy_method,
      absl::StrCat("--policy.budget_ratio=", o.budget_ratio), "--policy.codec=" + o.codec};
  if (!o.model.empty()) frontend.push_back("--model=" + o.model);
  RETURN_IF_ERROR(start("frontend", frontend).status());
  RETURN_IF_ERROR(AwaitNode(coordinator_address, v1::NODE_ROLE_DECODE, absl::Seconds(30)));
  if (o.prefill_worker) {
    RETURN_IF_ERROR(AwaitNode(coordinator_address, v1::NODE_ROLE_PREFILL, absl::Seconds(30)));
  }
  return cluster;
}

std::string LocalCluster::frontend_address() const {
  for (const ClusterMember& m : members_) {
    if (m.name == "frontend") return m.process.grpc_address();
  }
  return "";
}

std::string LocalCluster::openai_url() const {
  for (const ClusterMember& m : members_) {
    if (m.name == "frontend") return absl::StrCat("http://127.0.0.1:", m.process.api_port(), "/v1");
  }
  return "";
}

void LocalCluster::Stop() {
  while (!members_.empty()) {
    members_.back().process.Terminate(absl::Seconds(10)).IgnoreError();
    members_.pop_back();
  }
}

LocalCluster::~LocalCluster() { Stop(); }

}  // namespace glimpse::cli
