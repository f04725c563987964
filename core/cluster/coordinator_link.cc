#include "core/cluster/coordinator_link.h"

#include <unistd.h>

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(5);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

std::unique_ptr<grpc::ClientContext> WithDeadline() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  return ctx;
}

std::string NewIncarnation() {
  std::random_device rd;
  return absl::StrCat(absl::ToUnixMicros(absl::Now()), "-", rd());
}

std::string RoleName(v1::NodeRole role) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::NodeRole_Name(role), "NODE_ROLE_"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorLink>> CoordinatorLink::Start(
    CoordinatorLinkOptions options, std::function<v1::NodeLoad()> load,
    std::function<void(const std::string&)> release) {
  ASSIGN_OR_RETURN(std::unique_ptr<Coordinators> coordinators,
                   Coordinators::Connect(options.coordinator_addresses, options.tls));
  return std::unique_ptr<CoordinatorLink>(new CoordinatorLink(
      std::move(options), std::move(coordinators), std::move(load), std::move(release)));
}

CoordinatorLink::CoordinatorLink(CoordinatorLinkOptions options,
                                 std::unique_ptr<Coordinators> coordinators,
                                 std::function<v1::NodeLoad()> load,
                                 std::function<void(const std::string&)> release)
    : options_(std::move(options)),
      incarnation_(NewIncarnation()),
      coordinators_(std::move(coordinators)),
      load_(std::move(load)),
      release_(std::move(release)) {
  thread_ = std::thread([this] { Loop(); });
}

CoordinatorLink::~CoordinatorLink() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  if (!registered()) return;
  v1::DeregisterRequest req;
  req.set_node_id(options_.node_id);
  v1::DeregisterResponse resp;
  grpc::Status s = coordinators_->Call(
      WithDeadline, [&](auto& stub, auto* ctx) { return stub.Deregister(ctx, req, &resp); });
  if (!s.ok()) log::Warning("deregister failed", {{"error", s.error_message()}});
}

bool CoordinatorLink::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

bool CoordinatorLink::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + d;
  while (!stopping_) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
  }
  return !stopping_;
}

bool CoordinatorLink::Register(absl::Duration* interval) {
  v1::RegisterNodeRequest req;
  req.set_node_id(options_.node_id);
  req.set_role(options_.role);
  req.set_grpc_address(options_.grpc_address);
  req.set_ucx_address(options_.ucx_address);
  for (const std::string& a : options_.client_ucx_addresses) req.add_client_ucx_addresses(a);
  req.set_capacity_bytes(options_.capacity_bytes);
  req.set_incarnation(incarnation_);
  v1::RegisterNodeResponse resp;
  grpc::Status s = coordinators_->Call(
      WithDeadline, [&](auto& stub, auto* ctx) { return stub.RegisterNode(ctx, req, &resp); });
  if (!s.ok()) {
    log::Warning("registering with the coordinator failed; retrying",
                 {{"coordinator", coordinators_->addresses()},
                  {"code", static_cast<long long>(s.error_code())},
                  {"error", s.error_message()}});
    return false;
  }
  *interval = absl::Milliseconds(std::max<int64_t>(resp.heartbeat_interval_ms(), 10));
  log::Info("registered with the coordinator",
            {{"coordinator", coordinators_->addresses()},
             {"node_id", options_.node_id},
             {"heartbeat_ms", static_cast<long long>(resp.heartbeat_interval_ms())}});
  return true;
}

bool CoordinatorLink::Heartbeat() {
  v1::HeartbeatRequest req;
  req.set_node_id(options_.node_id);
  *req.mutable_load() = load_();
  v1::HeartbeatResponse resp;
  grpc::Status s = coordinators_->Call(
      WithDeadline, [&](auto& stub, auto* ctx) { return stub.Heartbeat(ctx, req, &resp); });
  if (!s.ok()) {
    log::Warning("heartbeat failed; registering again",
                 {{"code", static_cast<long long>(s.error_code())}, {"error", s.error_message()}});
    return false;
  }
  for (const std::string& session : resp.release_sessions()) release_(session);
  return true;
}

void CoordinatorLink::Loop() {
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Duration interval = absl::Seconds(1);
  while (true) {
    if (!Register(&interval)) {
      if (!Sleep(backoff)) return;
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    backoff = absl::Milliseconds(100);
    {
      absl::MutexLock lock(&mu_);
      registered_ = true;
    }
    while (Sleep(interval)) {
      if (!Heartbeat()) break;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    registered_ = false;
  }
}

std::unique_ptr<CoordinatorLink> RegisterWhenServing(
    CoordinatorLinkOptions o, int grpc_port, std::function<v1::NodeLoad()> load,
    std::function<void(const std::string&)> release) {
  if (o.coordinator_addresses.empty()) return nullptr;
  o.grpc_address = absl::StrCat(o.grpc_address, ":", grpc_port);
  if (o.node_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    o.node_id = absl::StrCat(RoleName(o.role), "-", host, "-", grpc_port);
  }
  absl::StatusOr<std::unique_ptr<CoordinatorLink>> link =
      CoordinatorLink::Start(o, std::move(load), std::move(release));
  if (!link.ok()) {
    log::Error("cannot reach the coordinator", {{"error", link.status().ToString()}});
    return nullptr;
  }
  return *std::move(link);
}

}  // namespace glimpse::cluster
