#include "core/cluster/coordinators.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace glimpse::cluster {

absl::StatusOr<std::unique_ptr<Coordinators>> Coordinators::Connect(
    const std::vector<std::string>& addresses, const TlsFiles& tls) {
  if (addresses.empty()) return absl::InvalidArgumentError("coordinator: no address configured");
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (const std::string& address : addresses) {
    if (address.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator: an empty address in \"", absl::StrJoin(addresses, ","), "\""));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, ClientChannel(address, tls));
    stubs.push_back(v1::Coordinator::NewStub(std::move(channel)));
  }
  return std::unique_ptr<Coordinators>(new Coordinators(addresses, std::move(stubs)));
}

Coordinators::Coordinators(std::vector<std::string> addresses,
                           std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs)
    : addresses_(std::move(addresses)), stubs_(std::move(stubs)) {}

std::string Coordinators::addresses() const { return absl::StrJoin(addresses_, ","); }

grpc::Status Coordinators::Call(const Context& context, const Rpc& rpc) {
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = current_;
  }
  std::vector<std::string> refusals;
  grpc::Status st;
  for (size_t i = 0; i < stubs_.size(); ++i) {
    const size_t c = (first + i) % stubs_.size();
    std::unique_ptr<grpc::ClientContext> ctx = context();
    st = rpc(*stubs_[c], ctx.get());
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      refusals.push_back(absl::StrCat(addresses_[c], ": ", st.error_message()));
      continue;
    }
    absl::MutexLock lock(&mu_);
    current_ = st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? (c + 1) % stubs_.size() : c;
    return st;
  }
  if (stubs_.size() == 1) return st;
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("no coordinator leads: ", absl::StrJoin(refusals, "; ")));
}

}  // namespace glimpse::cluster
