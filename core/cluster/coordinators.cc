#include "core/cluster/coordinators.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {
namespace {

constexpr size_t kMaxLeaderAddressBytes = 256;  // what a follower may name; longer is ignored
constexpr int kMaxRedirects = 2;                // leaders named and followed in one call

std::string LeaderNamed(const grpc::ClientContext& ctx) {
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto it = trailers.find(kLeaderMetadata);
  if (it == trailers.end() || it->second.size() > kMaxLeaderAddressBytes) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinators>> Coordinators::Connect(
    const std::vector<std::string>& addresses, const TlsFiles& tls) {
  if (addresses.empty()) return absl::InvalidArgumentError("coordinator: no address configured");
  std::vector<Target> targets;
  for (const std::string& address : addresses) {
    if (address.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator: an empty address in \"", absl::StrJoin(addresses, ","), "\""));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ClientChannel(address, tls));
    std::shared_ptr<v1::Coordinator::Stub> stub = v1::Coordinator::NewStub(channel);
    targets.push_back({address, std::move(channel), std::move(stub)});
  }
  return std::unique_ptr<Coordinators>(new Coordinators(std::move(targets), tls));
}

Coordinators::Coordinators(std::vector<Target> configured, TlsFiles tls)
    : configured_(std::move(configured)), tls_(std::move(tls)) {}

std::string Coordinators::addresses() const {
  std::vector<std::string> out;
  for (const Target& t : configured_) out.push_back(t.address);
  return absl::StrJoin(out, ",");
}

std::vector<Coordinators::Target> Coordinators::Order() {
  absl::MutexLock lock(&mu_);
  std::vector<Target> order;
  if (redirect_.has_value() && redirect_->address == current_) order.push_back(*redirect_);
  size_t first = 0;
  for (size_t i = 0; i < configured_.size(); ++i) {
    if (configured_[i].address == current_) first = i;
  }
  for (size_t i = 0; i < configured_.size(); ++i) {
    order.push_back(configured_[(first + i) % configured_.size()]);
  }
  return order;
}

std::optional<Coordinators::Target> Coordinators::Leader(const std::string& address) {
  for (const Target& t : configured_) {
    if (t.address == address) return t;
  }
  absl::MutexLock lock(&mu_);
  if (!redirect_.has_value() || redirect_->address != address) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ClientChannel(address, tls_);
    if (!channel.ok()) return std::nullopt;
    std::shared_ptr<v1::Coordinator::Stub> stub = v1::Coordinator::NewStub(*channel);
    redirect_ = Target{address, *std::move(channel), std::move(stub)};
  }
  return redirect_;
}

void Coordinators::Answered(const Target& target, bool move_on) {
  absl::MutexLock lock(&mu_);
  current_ = target.address;
  if (!move_on) return;
  // Past a coordinator that ran out of time: the configured one after it.
  for (size_t i = 0; i < configured_.size(); ++i) {
    if (configured_[i].address == target.address) {
      current_ = configured_[(i + 1) % configured_.size()].address;
      return;
    }
  }
  current_ = configured_.front().address;  // past the redirect
}

grpc::Status Coordinators::Call(const Context& context, const Rpc& rpc) {
  std::vector<Target> order = Order();
  std::vector<Target> tried_targets;
  std::vector<std::string> tried;
  std::vector<std::string> refusals;
  grpc::Status st;
  int redirects = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Target target = order[i];
    if (std::find(tried.begin(), tried.end(), target.address) != tried.end()) continue;
    tried.push_back(target.address);
    tried_targets.push_back(target);
    std::unique_ptr<grpc::ClientContext> ctx = context();
    st = rpc(*target.stub, ctx.get());
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) {
      Answered(target, st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
      return st;
    }
    refusals.push_back(absl::StrCat(target.address, ": ", st.error_message()));
    // A follower named the leader: it goes next (once).
    const std::string named = LeaderNamed(*ctx);
    if (named.empty() || redirects == kMaxRedirects ||
        std::find(tried.begin(), tried.end(), named) != tried.end()) {
      continue;
    }
    if (std::optional<Target> leader = Leader(named); leader.has_value()) {
      ++redirects;
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, *leader);
    }
  }
  // A coordinator that is back (restarted, or the new leader after a restart) is dialled at the
  // next call, not after the channel's backoff.
  for (const Target& t : tried_targets)
    grpc::experimental::ChannelResetConnectionBackoff(t.channel.get());
  if (tried.size() == 1) return st;
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("no coordinator leads: ", absl::StrJoin(refusals, "; ")));
}

}  // namespace glimpse::cluster
