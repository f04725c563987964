#include "core/cluster/coordinator_peers.h"

#include "absl/synchronization/mutex.h"
#include "core/cluster/node_role.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {

absl::StatusOr<std::shared_ptr<CoordinatorPeers>> CoordinatorPeers::Start(
    CoordinatorPeersOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Coordinators> coordinators,
                   Coordinators::Connect(options.coordinator_addresses, options.tls));
  std::shared_ptr<CoordinatorPeers> peers(
      new CoordinatorPeers(std::move(options), std::move(coordinators)));
  {
    absl::MutexLock lock(&peers->refresh_mu_);
    (void)peers->Refresh();
  }
  peers->thread_ = std::thread([p = peers.get()] { p->Loop(); });
  return peers;
}

CoordinatorPeers::CoordinatorPeers(CoordinatorPeersOptions options,
                                   std::unique_ptr<Coordinators> coordinators)
    : options_(std::move(options)), coordinators_(std::move(coordinators)) {}

CoordinatorPeers::~CoordinatorPeers() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

bool CoordinatorPeers::Known(std::string_view address) const {
  absl::MutexLock lock(&mu_);
  return addresses_.contains(address);
}

bool CoordinatorPeers::Belongs(std::string_view address, std::string_view role,
                               std::string_view id) {
  auto owned = [&] {
    absl::MutexLock lock(&mu_);
    auto it = addresses_.find(address);
    return it != addresses_.end() && it->second.role == role && (id == "*" || it->second.id == id);
  };
  if (owned()) return true;
  // Allows refreshes the list for an address it does not know (a node that just registered).
  return Allows(address) && owned();
}

transport::PeerVerdict CoordinatorPeers::Peek(std::string_view address) const {
  absl::MutexLock lock(&mu_);
  if (addresses_.contains(address)) return transport::PeerVerdict::kAllowed;
  if (failing_ || refused_.contains(address)) return transport::PeerVerdict::kRefused;
  return transport::PeerVerdict::kUnknown;
}

bool CoordinatorPeers::Allows(std::string_view address) {
  if (Known(address)) return true;
  absl::MutexLock lock(&refresh_mu_);
  // Another caller may have refreshed while this one waited for the lock.
  if (Known(address)) return true;
  // While the coordinator does not answer, the loop retries; a miss must not wait on it too.
  if (failing_) return false;
  // Refused since the last list came: refused again at once, so a peer that is not a member costs
  // one wait per refresh, not one per batch.
  if (Peek(address) == transport::PeerVerdict::kRefused) return false;
  // A node that registered after the last refresh (a decode worker whose first act is a load) is
  // let in: wait out the rate limit and look again rather than refuse it.
  const absl::Duration since = absl::Now() - last_refresh_;
  if (since < options_.min_miss_gap) absl::SleepFor(options_.min_miss_gap - since);
  if (Refresh().ok() && Known(address)) return true;
  absl::MutexLock list(&mu_);
  if (refused_.size() < kMaxRefused) refused_.insert(std::string(address));
  return false;
}

absl::Status CoordinatorPeers::Refresh() {
  last_refresh_ = absl::Now();
  auto context = [this] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    // A channel that failed to connect (a coordinator still starting) fails calls at once during
    // its reconnect backoff; wait for it within the deadline instead. Not with several: a down
    // one is passed over for the next (coordinators.h).
    ctx->set_wait_for_ready(coordinators_->size() == 1);
    return ctx;
  };
  v1::ListNodesRequest req;
  req.set_include_dead(true);
  v1::ListNodesResponse resp;
  grpc::Status s = coordinators_->Call(
      context, [&](auto& stub, auto* ctx) { return stub.ListNodes(ctx, req, &resp); });
  if (!s.ok()) {
    if (!failing_) {
      log::Warning("cannot refresh the peer allowlist from the coordinator; keeping the last list",
                   {{"coordinator", coordinators_->addresses()},
                    {"code", static_cast<long long>(s.error_code())},
                    {"error", s.error_message()}});
    }
    failing_ = true;
    return absl::UnavailableError(s.error_message());
  }
  if (failing_) log::Info("peer allowlist refreshed from the coordinator again", {});
  failing_ = false;
  std::map<std::string, Owner, std::less<>> addresses;
  for (const v1::NodeInfo& n : resp.nodes()) {
    const Owner owner{std::string(NodeRoleName(n.role())), n.node_id()};
    if (!n.ucx_address().empty()) addresses.emplace(n.ucx_address(), owner);
    for (const std::string& a : n.client_ucx_addresses()) addresses.emplace(a, owner);
  }
  absl::MutexLock lock(&mu_);
  refused_.clear();  // a new list: every address gets its chance again
  addresses_ = std::move(addresses);
  return absl::OkStatus();
}

void CoordinatorPeers::Loop() {
  absl::Duration wait = options_.refresh;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = absl::Now() + wait;
      while (!stopping_) {
        if (cv_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
      }
      if (stopping_) return;
    }
    absl::MutexLock lock(&refresh_mu_);
    // Retry soon after a failure: newcomers are refused until the list is fresh again.
    wait = Refresh().ok() ? options_.refresh : options_.min_miss_gap;
  }
}

}  // namespace glimpse::cluster
