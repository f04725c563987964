// Generate calls in flight per tenant, at most `limit` each, so that one tenant's burst cannot
// hold every serving thread of the frontend (grpc.max_threads) while the others wait. A call
// past its tenant's limit is refused at once (RESOURCE_EXHAUSTED naming the tenant and the limit);
// the client retries later. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace glimpse::frontend {

class TenantCalls {
 public:
  // `limit` < 1: no limit.
  explicit TenantCalls(int64_t limit) : limit_(limit) {}

  // Holds one of the tenant's calls until destroyed.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : calls_(other.calls_), tenant_(std::move(other.tenant_)) {
      other.calls_ = nullptr;
    }
    Slot& operator=(Slot&&) = delete;
    ~Slot();

   private:
    friend class TenantCalls;
    Slot(TenantCalls* calls, std::string tenant) : calls_(calls), tenant_(std::move(tenant)) {}
    TenantCalls* calls_;
    std::string tenant_;
  };

  absl::StatusOr<Slot> Enter(const std::string& tenant);
  int64_t InFlight(const std::string& tenant) const;

 private:
  void Leave(const std::string& tenant);

  const int64_t limit_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> in_flight_ ABSL_GUARDED_BY(mu_);  // tenants with calls only
};

}  // namespace glimpse::frontend
