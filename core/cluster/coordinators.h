// Coordinators: the coordinators a node or frontend calls (its `coordinator` key): one address,
// or several where coordinators are elected on etcd (coordinator/leadership.h) and only the
// leader answers; a follower answers UNAVAILABLE naming the leader, in its message and in the
// trailing metadata kLeaderMetadata. A call goes to the coordinator that answered last; where
// that one answers UNAVAILABLE (it is down, or follows) the leader it named is tried next, then
// the configured ones in turn, each at most once per call, so a client finds a new leader within
// one call. A leader named that is not configured (a Kubernetes Service in front of pods, each
// advertising its pod IP) is dialled with the same TLS settings; one such is kept at a time, and
// at most two are followed in one call. A
// call that ran out of time (DEADLINE_EXCEEDED) is not tried again, but the next call starts at
// another coordinator: a leader that hangs is left behind too. A call none answered resets the
// channels' reconnect backoff, so that the next call reaches a coordinator that came back at once
// rather than after gRPC's backoff (up to 2 s here). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/grpc/server.h"
#include "glimpse/v1/coordinator.grpc.pb.h"

namespace glimpse::cluster {

// Trailing metadata of a follower's UNAVAILABLE: the leader's advertised host:port.
inline constexpr char kLeaderMetadata[] = "glimpse-coordinator-leader";

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

  size_t size() const { return configured_.size(); }
  std::string addresses() const;  // the configured ones, comma-separated: for messages and logs

 private:
  struct Target {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<v1::Coordinator::Stub> stub;
  };
  Coordinators(std::vector<Target> configured, TlsFiles tls);
  // The order to try this call in: the one that answered last first.
  std::vector<Target> Order();
  // A target for the leader a follower named: a configured one, or the redirect (made or
  // replaced); nullopt when it cannot be dialled.
  std::optional<Target> Leader(const std::string& address);
  void Answered(const Target& target, bool move_on);

  const std::vector<Target> configured_;
  const TlsFiles tls_;
  absl::Mutex mu_;
  std::optional<Target> redirect_ ABSL_GUARDED_BY(mu_);  // a leader named but not configured
  std::string current_ ABSL_GUARDED_BY(mu_);             // the address that answered last
};

}  // namespace glimpse::cluster
