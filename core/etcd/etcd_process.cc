#include "core/etcd/etcd_process.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::etcd {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";
constexpr int kStartAttempts = 3;

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::string& dir) {
  if (access(kEtcd, X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(kEtcd,
                                                      " is missing: install Debian's etcd-server "
                                                      "(tools/setup/install_deps.sh does)"));
  }
  const std::filesystem::path root(dir);
  std::filesystem::create_directories(root);
  // A member that ran here before: the same ports, since its data records its peer URL.
  int client_port = 0, peer_port = 0;
  if (std::ifstream ports(root / "ports");
      ports >> client_port >> peer_port && std::filesystem::exists(root / "data")) {
    std::unique_ptr<EtcdProcess> etcd(new EtcdProcess(dir, client_port, peer_port));
    absl::Status started = etcd->Launch();
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
    std::unique_ptr<EtcdProcess> etcd(new EtcdProcess(dir, client_port, peer_port));
    std::filesystem::remove_all(root / "data");  // a fresh member
    last = etcd->Launch();
    if (last.ok()) {
      std::ofstream(root / "ports") << client_port << " " << peer_port << "\n";
      return etcd;
    }
  }
  return last;
}

absl::Status EtcdProcess::Launch() {
  const std::string client = absl::StrCat("http://127.0.0.1:", client_port_);
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
  const std::vector<std::string> args = {"--name=glimpse-local",
                                         absl::StrCat("--data-dir=", dir_, "/data"),
                                         "--logger=zap",
                                         absl::StrCat("--listen-client-urls=", client),
                                         absl::StrCat("--advertise-client-urls=", client),
                                         absl::StrCat("--listen-peer-urls=", peer),
                                         absl::StrCat("--initial-advertise-peer-urls=", peer),
                                         absl::StrCat("--initial-cluster=glimpse-local=", peer)};
  // A loaded test machine may take a while to elect the one member.
  ASSIGN_OR_RETURN(ServiceProcess p, ServiceProcess::StartUntil(
                                         kEtcd, args, dir_ + "/etcd.log",
                                         [](const std::string& line) {
                                           return line.find("serving client traffic") !=
                                                  std::string::npos;
                                         },
                                         absl::Seconds(60)));
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
  return Launch();
}

}  // namespace glimpse::etcd
