#include "tools/cli/local_cluster.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/cluster/coordinators.h"
#include "core/common/grpc/certificates.h"
#include "core/common/grpc/identity.h"
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

// Each member's certificate (the file name, its role and its node id) and the operator's, which
// this process uses to ask the coordinator who registered.
struct Member {
  const char* name;
  std::string_view role;
  const char* id;
};
constexpr Member kMembers[] = {{"coordinator", roles::kCoordinator, "coordinator-0"},
                               {"cache-node", roles::kCache, "cache-0"},
                               {"decode-worker", roles::kDecode, "decode-0"},
                               {"prefill-worker", roles::kPrefill, "prefill-0"},
                               {"frontend", roles::kFrontend, "frontend-0"},
                               {"admin", roles::kAdmin, "glimpse-up"},
                               {"etcd", "", ""}};  // serves the coordinators (no identity)

absl::Status MakeClusterCertificates(const std::string& tls_dir) {
  std::vector<CertificateSpec> specs;
  for (const Member& m : kMembers) {
    CertificateSpec s;
    s.name = m.name;
    s.role = std::string(m.role);
    s.id = m.id;
    specs.push_back(std::move(s));
  }
  return MakeCertificates(tls_dir, specs);
}

// How `name` serves (mutual TLS: only callers with a certificate from the cluster's CA) and
// connects to the others. The coordinator calls no one; the frontend's own API is plaintext.
std::vector<std::string> TlsFlags(const std::string& tls_dir, const std::string& name) {
  const TlsFiles f = CertificateFiles(tls_dir, name);
  std::vector<std::string> flags;
  if (name != "frontend") {
    flags = {"--tls.cert=" + f.cert_file, "--tls.key=" + f.key_file,
             "--tls.client_ca=" + f.ca_file};
  }
  if (name != "coordinator") {
    flags.insert(flags.end(), {"--client_tls.cert=" + f.cert_file, "--client_tls.key=" + f.key_file,
                               "--client_tls.ca=" + f.ca_file});
  }
  return flags;
}

const char* NodeId(const std::string& name) {
  for (const Member& m : kMembers) {
    if (name == m.name) return m.id;
  }
  return "";
}

// Waits until the (leading) coordinator lists a live node of `role`.
absl::Status AwaitNode(const std::vector<std::string>& coordinators, const TlsFiles& tls,
                       v1::NodeRole role, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<cluster::Coordinators> stubs,
                   cluster::Coordinators::Connect(coordinators, tls));
  auto context = [] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    return ctx;
  };
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    v1::ListNodesRequest req;
    req.set_role(role);
    v1::ListNodesResponse resp;
    const grpc::Status st = stubs->Call(
        context, [&](auto& stub, auto* ctx) { return stub.ListNodes(ctx, req, &resp); });
    if (st.ok() && resp.nodes_size() > 0) return absl::OkStatus();
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
  // Internal calls are mutual TLS with a throwaway CA, as in a deployment; the frontend's client
  // API stays plaintext on loopback.
  const std::string tls_dir = (dir / "tls").string();
  RETURN_IF_ERROR(MakeClusterCertificates(tls_dir));
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->members_.reserve(6);  // start() hands out pointers into it
  // `name` runs glimpse-<name>; a second instance of it is told apart by `instance` (its log).
  auto start = [&](const std::string& name, std::vector<std::string> args,
                   const std::string& instance = "") -> absl::StatusOr<const ServiceProcess*> {
    const std::string binary = ServiceBinary(o.bin_dir, "glimpse-" + name);
    if (!fs::exists(binary)) {
      return absl::NotFoundError(absl::StrCat(binary, " not found (build it, or pass --bin-dir)"));
    }
    const std::string log = (dir / "logs" / (name + instance + ".log")).string();
    const std::vector<std::string> tls = TlsFlags(tls_dir, name);
    args.insert(args.end(), tls.begin(), tls.end());
    if (name != "coordinator" && name != "frontend") {  // the nodes that register
      args.push_back(absl::StrCat("--node_id=", NodeId(name)));
    }
    absl::StatusOr<ServiceProcess> p = ServiceProcess::Start(binary, args, log);
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat(name, ": ", p.status().message(),
                                                          "\n--- ", log, " ---\n", Tail(log)));
    }
    cluster->members_.push_back({name + instance, *std::move(p)});
    return &cluster->members_.back().process;
  };
  std::vector<std::string> coordinator_args;
  if (o.etcd) {
    // Over mutual TLS, as the coordinators' own calls are.
    ASSIGN_OR_RETURN(cluster->etcd_, etcd::EtcdProcess::Start((dir / "etcd").string(),
                                                              CertificateFiles(tls_dir, "etcd")));
    const TlsFiles coordinator = CertificateFiles(tls_dir, "coordinator");
    coordinator_args.insert(
        coordinator_args.end(),
        {"--store.etcd_endpoints=" + cluster->etcd_->endpoint(),
         "--store.etcd_ca=" + coordinator.ca_file, "--store.etcd_cert=" + coordinator.cert_file,
         "--store.etcd_key=" + coordinator.key_file});
  } else {
    coordinator_args.push_back("--store.path=" + (dir / "coordinator").string());
  }
  if (!o.lease_ttl.empty()) coordinator_args.push_back("--lease.fixed_ttl=" + o.lease_ttl);
  coordinator_args.push_back(
      absl::StrCat("--routing.prefill_on_decode_tokens=", o.prefill_on_decode_tokens));
  // On etcd, two coordinators: one leads, the other takes over if it dies.
  std::vector<std::string> coordinators;
  for (const std::string instance : {"", "-1"}) {
    if (!o.etcd && !instance.empty()) break;
    ASSIGN_OR_RETURN(const ServiceProcess* c, start("coordinator", coordinator_args, instance));
    coordinators.push_back(c->grpc_address());
  }
  const std::string coordinator_flag = "--coordinator=" + absl::StrJoin(coordinators, ",");
  // On etcd, the cache node announces itself there and the workers find it there
  // (core/cluster/etcd_membership.h), each with its own certificate; else they are told it.
  auto membership = [&](const std::string& name) {
    if (!o.etcd) return std::vector<std::string>{};
    const TlsFiles f = CertificateFiles(tls_dir, name);
    return std::vector<std::string>{"--membership.etcd_endpoints=" + cluster->etcd_->endpoint(),
                                    "--membership.etcd_ca=" + f.ca_file,
                                    "--membership.etcd_cert=" + f.cert_file,
                                    "--membership.etcd_key=" + f.key_file};
  };
  std::vector<std::string> cache_args = {"--storage.path=" + (dir / "cache-node").string(),
                                         "--storage.sync_every_put=false", coordinator_flag};
  for (std::string& f : membership("cache-node")) cache_args.push_back(std::move(f));
  ASSIGN_OR_RETURN(const ServiceProcess* cache, start("cache-node", cache_args));
  // Both workers run the model: the same flags.
  std::vector<std::string> worker = {coordinator_flag, absl::StrCat("--threads=", o.threads)};
  if (!o.etcd) worker.push_back("--cache_node=" + cache->grpc_address());
  if (!o.model.empty()) worker.push_back("--model=" + o.model);
  if (!o.lookahead_module.empty()) worker.push_back("--lookahead_module=" + o.lookahead_module);
  if (!o.eviction_profile.empty()) worker.push_back("--eviction_profile=" + o.eviction_profile);
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  RETURN_IF_ERROR(start("decode-worker", with(worker, membership("decode-worker"))).status());
  if (o.prefill_worker) {
    RETURN_IF_ERROR(start("prefill-worker", with(worker, membership("prefill-worker"))).status());
  }
  std::vector<std::string> frontend = {coordinator_flag, "--policy.method=" + o.policy_method,
                                       absl::StrCat("--policy.budget_ratio=", o.budget_ratio),
                                       "--policy.codec=" + o.codec};
  if (!o.model.empty()) frontend.push_back("--model=" + o.model);
  RETURN_IF_ERROR(start("frontend", frontend).status());
  const TlsFiles admin = CertificateFiles(tls_dir, "admin");
  RETURN_IF_ERROR(AwaitNode(coordinators, admin, v1::NODE_ROLE_DECODE, absl::Seconds(30)));
  if (o.prefill_worker) {
    RETURN_IF_ERROR(AwaitNode(coordinators, admin, v1::NODE_ROLE_PREFILL, absl::Seconds(30)));
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
  if (etcd_ != nullptr) etcd_->Stop().IgnoreError();  // after the coordinator, which writes to it
  etcd_.reset();
}

LocalCluster::~LocalCluster() { Stop(); }

}  // namespace glimpse::cli
