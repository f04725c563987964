#include "core/common/netns.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace glimpse {

const char kIpBinary[] = "/usr/sbin/ip";

absl::Status RunIp(const std::vector<std::string>& args) {
  if (access(kIpBinary, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kIpBinary, " is missing: install Debian's iproute2"));
  }
  char err_path[] = "/tmp/glimpse-ip-XXXXXX";
  const int err_fd = mkstemp(err_path);
  if (err_fd < 0) return absl::InternalError("mkstemp failed");
  unlink(err_path);
  std::vector<std::string> argv = {kIpBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(err_fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    dup2(err_fd, STDERR_FILENO);
    execv(kIpBinary, cargv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::string err(4096, '\0');
  const ssize_t n = pread(err_fd, err.data(), err.size(), 0);
  err.resize(n > 0 ? static_cast<size_t>(n) : 0);
  close(err_fd);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("ip ", absl::StrJoin(args, " "), " failed: ", err));
}

namespace {

// Deletes the namespaces (and so their links) of glimpse processes that are gone.
void DeleteLeftovers() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "glimpse-%d-", &pid) != 1 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its process runs
    (void)RunIp({"netns", "del", name});
  }
}

// Set by IsolateThisProcess (before any thread), read later.
bool isolated = false;

}  // namespace

absl::Status Netns::IsolateThisProcess() {
  if (unshare(CLONE_NEWNET) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("unshare(CLONE_NEWNET): ", std::strerror(errno)));
  }
  RETURN_IF_ERROR(RunIp({"link", "set", "lo", "up"}));
  isolated = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Netns>> Netns::Create(int index) {
  if (index < 0 || index > 9) return absl::InvalidArgumentError("netns index is 0 to 9");
  if (!isolated) {
    return absl::FailedPreconditionError(
        "this test process is not in a network namespace of its own (Netns::IsolateThisProcess "
        "failed or was not called): its links would be seen by every process on the host");
  }
  DeleteLeftovers();
  const std::string name = absl::StrCat("glimpse-", getpid(), "-", index);
  (void)RunIp({"netns", "del", name});  // this process's own, from an earlier Create
  RETURN_IF_ERROR(RunIp({"netns", "add", name}));
  std::unique_ptr<Netns> ns(new Netns(name, index));
  RETURN_IF_ERROR(RunIp({"-n", name, "link", "set", "lo", "up"}));
  return ns;
}

Netns::~Netns() { (void)RunIp({"netns", "del", name_}); }

absl::StatusOr<Netns::Link> Netns::AddLink() {
  // 10.<200 + index>.<pid's low byte>.<4 * link>/30: distinct per process, namespace and link.
  const int k = links_++;
  if (k > 62) return absl::ResourceExhaustedError("at most 63 links per namespace");
  const std::string net = absl::StrCat("10.", 200 + index_, ".", getpid() % 256, ".");
  Link link;
  link.here = absl::StrCat("gl", getpid() % 100000, "n", index_, "l", k);  // at most 15 bytes
  const std::string there = absl::StrCat(link.here, "x");
  link.here_ip = absl::StrCat(net, 4 * k + 1);
  link.there_ip = absl::StrCat(net, 4 * k + 2);
  RETURN_IF_ERROR(
      RunIp({"link", "add", link.here, "type", "veth", "peer", "name", there, "netns", name_}));
  RETURN_IF_ERROR(RunIp({"addr", "add", link.here_ip + "/30", "dev", link.here}));
  RETURN_IF_ERROR(RunIp({"-n", name_, "addr", "add", link.there_ip + "/30", "dev", there}));
  RETURN_IF_ERROR(RunIp({"link", "set", link.here, "up"}));
  RETURN_IF_ERROR(RunIp({"-n", name_, "link", "set", there, "up"}));
  return link;
}

absl::Status Netns::Cut(const Link& link) { return RunIp({"link", "set", link.here, "down"}); }

absl::Status Netns::Restore(const Link& link) { return RunIp({"link", "set", link.here, "up"}); }

std::vector<std::string> Netns::Exec() const { return {kIpBinary, "netns", "exec", name_}; }

}  // namespace glimpse
