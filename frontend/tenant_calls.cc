#include "frontend/tenant_calls.h"

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace glimpse::frontend {

TenantCalls::Slot::~Slot() {
  if (calls_ != nullptr) calls_->Leave(tenant_);
}

absl::StatusOr<TenantCalls::Slot> TenantCalls::Enter(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  int64_t& n = in_flight_[tenant];
  if (limit_ > 0 && n >= limit_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "tenant %s has %d Generate calls in flight, its limit (limits.max_calls_per_tenant); "
        "retry when one ends",
        tenant, n));
  }
  ++n;
  return Slot(this, tenant);
}

int64_t TenantCalls::InFlight(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(tenant);
  return it == in_flight_.end() ? 0 : it->second;
}

void TenantCalls::Leave(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(tenant);
  if (--it->second == 0) in_flight_.erase(it);
}

}  // namespace glimpse::frontend
