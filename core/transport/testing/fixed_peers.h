// A PeerAllowlist whose members a test names, for tests of engines restricted to peers without a
// coordinator (the coordinator's own is core/cluster/coordinator_peers.h).
#pragma once

#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "core/transport/peer_allowlist.h"

namespace glimpse::transport::testing {

class FixedPeers final : public PeerAllowlist {
 public:
  bool Allows(std::string_view address) override { return Peek(address) == PeerVerdict::kAllowed; }
  // A fixed list knows no owners.
  bool Belongs(std::string_view address, std::string_view, std::string_view) override {
    return Allows(address);
  }
  // A fixed list knows every answer.
  PeerVerdict Peek(std::string_view address) const override {
    absl::MutexLock lock(&mu_);
    return members_.contains(address) ? PeerVerdict::kAllowed : PeerVerdict::kRefused;
  }
  void Add(const std::string& address) {
    absl::MutexLock lock(&mu_);
    members_.insert(address);
  }

 private:
  mutable absl::Mutex mu_;
  std::set<std::string, std::less<>> members_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::transport::testing
