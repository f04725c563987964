// Netns: a network namespace of its own for a test's process, joined to the test's namespace by
// veth links (a /30 each), so that a link can be cut as a network cuts it: Cut downs this end, and
// every packet over the link then vanishes (no reset, no refusal: the peer's calls hang until
// their deadlines or keepalives). What TcpProxy (tcp_proxy.h) cannot show; tests/netns_test.py
// does the like for a whole cluster from Python, this is for gtest tests. Needs CAP_NET_ADMIN
// and Debian's iproute2 (`ip`); Create says why not (FAILED_PRECONDITION), for a test to skip.
// The test's ends of the links must not be seen by other processes (UCX engines advertise every
// interface they find, and a cut link then fails their peers' connects): a test process calls
// IsolateThisProcess first, in main() before any thread starts, which moves it (and every child it
// starts later) into a network namespace of its own with only its loopback; Create refuses until it
// has. Namespaces and links are named after the process id, so concurrent tests do not collide;
// the destructor deletes the namespace, and with it its links, and Create deletes those a process
// that no longer runs left behind (a test killed at its timeout). Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse {

class Netns {
 public:
  struct Link {
    std::string here;               // this end's device, in the test's namespace
    std::string here_ip, there_ip;  // the addresses of the two ends
  };

  // Moves this process into a network namespace of its own (only loopback, up); why not when it
  // cannot (no CAP_NET_ADMIN, or threads already run). Once, before any thread starts.
  static absl::Status IsolateThisProcess();
  // A namespace with only its loopback up. `index` (0 to 9) tells apart a test's namespaces.
  // FAILED_PRECONDITION unless IsolateThisProcess succeeded, or namespaces cannot be made here.
  static absl::StatusOr<std::unique_ptr<Netns>> Create(int index);
  ~Netns();

  // A new link between the test's namespace and this one.
  absl::StatusOr<Link> AddLink();
  absl::Status Cut(const Link& link);      // this end down
  absl::Status Restore(const Link& link);  // up again

  // The argv prefix that runs a program inside the namespace: {"ip", "netns", "exec", name}.
  // `ip netns exec` execs the program, so its process is the one started.
  std::vector<std::string> Exec() const;
  const std::string& name() const { return name_; }

 private:
  Netns(std::string name, int index) : name_(std::move(name)), index_(index) {}

  const std::string name_;
  const int index_;
  int links_ = 0;
};

// Runs `ip args...` and waits for it; its stderr in the error.
absl::Status RunIp(const std::vector<std::string>& args);
extern const char kIpBinary[];

}  // namespace glimpse
