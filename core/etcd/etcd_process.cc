#include "core/etcd/etcd_process.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace glimpse::etcd {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";
constexpr int kStartAttempts = 3;
constexpr char kLocalName[] = "glimpse-local";
// What a member logs once it serves clients (after a majority elected a leader), and once it
// listens for its peers.
constexpr char kServing[] = "serving client traffic";
constexpr char kListening[] = "now serving peer/client/metrics";
// A loaded test machine may take a while to elect.
constexpr absl::Duration kStartTimeout = absl::Seconds(60);

absl::Status HaveEtcd() {
  if (access(kEtcd, X_OK) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      kEtcd, " is missing: install Debian's etcd-server (tools/setup/install_deps.sh does)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::string& dir,
                                                                const TlsFiles& tls,
                                                                const std::string& also_listen_on) {
  RETURN_IF_ERROR(HaveEtcd());
  const std::filesystem::path root(dir);
  std::filesystem::create_directories(root);
  // A member that ran here before: the same ports, since its data records its peer URL.
  int client_port = 0, peer_port = 0;
  if (std::ifstream ports(root / "ports");
      ports >> client_port >> peer_port && std::filesystem::exists(root / "data")) {
    std::unique_ptr<EtcdProcess> etcd(
        new EtcdProcess(dir, kLocalName, client_port, peer_port, tls, also_listen_on));
    absl::Status started = etcd->Launch(absl::StrCat(kLocalName, "=", etcd->peer_url()), kServing);
    if (!started.ok()) {
      return absl::Status(started.code(),
                          absl::StrCat("the etcd member in ", dir, " (client port ", client_port,
                                       ", peer port ", peer_port, "): ", started.message()));
    }
    return etcd;
  }
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(client_port, FreeLoopbackPort());
    ASSIGN_OR_RETURN(peer_port, FreeLoopbackPort());
    std::unique_ptr<EtcdProcess> etcd(
        new EtcdProcess(dir, kLocalName, client_port, peer_port, tls, also_listen_on));
    std::filesystem::remove_all(root / "data");  // a fresh member
    last = etcd->Launch(absl::StrCat(kLocalName, "=", etcd->peer_url()), kServing);
    if (last.ok()) {
      std::ofstream(root / "ports") << client_port << " " << peer_port << "\n";
      return etcd;
    }
  }
  return last;
}

absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> EtcdProcess::StartCluster(
    const std::string& dir, int members) {
  RETURN_IF_ERROR(HaveEtcd());
  if (members < 1 || members % 2 == 0) {
    return absl::InvalidArgumentError("etcd: a cluster of an odd number of members");
  }
  // A port picked free may be taken before a member binds it (a member that cannot bind exits,
  // failing its launch): pick them all again.
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> cluster =
        StartClusterOnce(dir, members);
    if (cluster.ok()) return cluster;
    last = cluster.status();
  }
  return last;
}

absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> EtcdProcess::StartClusterOnce(
    const std::string& dir, int members) {
  std::vector<std::unique_ptr<EtcdProcess>> out;
  std::vector<std::string> cluster;
  for (int i = 0; i < members; ++i) {
    const std::string member_dir = absl::StrCat(dir, "/member-", i);
    std::filesystem::remove_all(member_dir);
    std::filesystem::create_directories(member_dir);
    ASSIGN_OR_RETURN(const int client_port, FreeLoopbackPort());
    ASSIGN_OR_RETURN(const int peer_port, FreeLoopbackPort());
    out.emplace_back(
        new EtcdProcess(member_dir, absl::StrCat(kLocalName, "-", i), client_port, peer_port));
    cluster.push_back(absl::StrCat(out.back()->name_, "=", out.back()->peer_url()));
  }
  // A member serves clients only once a majority has joined: each is launched once it listens
  // for its peers (from this thread: a child dies with the thread that started it), then all
  // are waited for.
  for (const std::unique_ptr<EtcdProcess>& member : out) {
    RETURN_IF_ERROR(member->Launch(absl::StrJoin(cluster, ","), kListening));
  }
  const absl::Time deadline = absl::Now() + kStartTimeout;
  for (const std::unique_ptr<EtcdProcess>& member : out) {
    while (true) {
      std::ifstream log(member->dir_ + "/etcd.log");
      const std::string text((std::istreambuf_iterator<char>(log)),
                             std::istreambuf_iterator<char>());
      if (text.find(kServing) != std::string::npos) break;
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "etcd member ", member->name_, " did not serve clients within ",
            absl::FormatDuration(kStartTimeout), "; its log: ", member->dir_, "/etcd.log"));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  return out;
}

std::string EtcdProcess::peer_url() const { return absl::StrCat("http://127.0.0.1:", peer_port_); }

absl::Status EtcdProcess::Launch(const std::string& initial_cluster, std::string_view ready) {
  initial_cluster_ = initial_cluster;
  const std::string scheme = tls_.cert_file.empty() ? "http" : "https";
  const std::string client = absl::StrCat(scheme, "://127.0.0.1:", client_port_);
  std::string listen = client;
  if (!also_listen_on_.empty()) {
    absl::StrAppend(&listen, ",", scheme, "://", also_listen_on_, ":", client_port_);
  }
  const std::string peer = peer_url();
  std::vector<std::string> args = {absl::StrCat("--name=", name_),
                                   absl::StrCat("--data-dir=", dir_, "/data"),
                                   "--logger=zap",
                                   absl::StrCat("--listen-client-urls=", listen),
                                   absl::StrCat("--advertise-client-urls=", client),
                                   absl::StrCat("--listen-peer-urls=", peer),
                                   absl::StrCat("--initial-advertise-peer-urls=", peer),
                                   absl::StrCat("--initial-cluster=", initial_cluster)};
  if (!tls_.cert_file.empty()) {
    args.insert(args.end(), {"--cert-file=" + tls_.cert_file, "--key-file=" + tls_.key_file,
                             "--trusted-ca-file=" + tls_.ca_file, "--client-cert-auth"});
  }
  ASSIGN_OR_RETURN(ServiceProcess p, ServiceProcess::StartUntil(
                                         kEtcd, args, dir_ + "/etcd.log",
                                         [ready](const std::string& line) {
                                           return line.find(ready) != std::string::npos;
                                         },
                                         kStartTimeout));
  process_ = std::make_unique<ServiceProcess>(std::move(p));
  return absl::OkStatus();
}

std::string EtcdProcess::endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }

void EtcdProcess::Kill() { process_.reset(); }

absl::Status EtcdProcess::Stop() {
  if (process_ == nullptr) return absl::OkStatus();
  absl::StatusOr<int> rc = process_->Terminate(absl::Seconds(10));
  process_.reset();
  return rc.status();
}

absl::Status EtcdProcess::Restart() {
  Kill();
  return Launch(initial_cluster_, kServing);
}

}  // namespace glimpse::etcd
