// Coordinators: the coordinators a node or frontend calls (its `coordinator` key): one address,
// or several where coordinators are elected on etcd (coordinator/leadership.h) and only the
// leader answers; the others answer UNAVAILABLE naming it. A call goes to the coordinator that
// answered last; where that one answers UNAVAILABLE (it is down, or follows) the next is tried at
// once, each at most once per call, so a client finds a new leader within one call. A call that
// ran out of time (DEADLINE_EXCEEDED) is not tried again, but the next call starts at the next
// coordinator: a leader that hangs is left behind too. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/grpc/server.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse::cluster {

class Coordinators {
 public:
  // InvalidArgument without addresses or with an empty one; connects lazily.
  static absl::StatusOr<std::unique_ptr<Coordinators>> Connect(
      const std::vector<std::string>& addresses, const TlsFiles& tls);

  // A fresh context for each attempt (deadline, metadata, wait_for_ready: the caller's).
  using Context = std::function<std::unique_ptr<grpc::ClientContext>()>;
  using Rpc = std::function<grpc::Status(v1::Coordinator::Stub&, grpc::ClientContext*)>;
  // The status of the last attempt; an UNAVAILABLE names every coordinator tried.
  grpc::Status Call(const Context& context, const Rpc& rpc);

  size_t size() const { return stubs_.size(); }
  std::string addresses() const;  // comma-separated, for messages and logs

 private:
  Coordinators(std::vector<std::string> addresses,
               std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs);

  const std::vector<std::string> addresses_;
  const std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;  // the one that answered last
};

}  // namespace glimpse::cluster
