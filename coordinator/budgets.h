// BudgetLedger: KV memory reserved per decode worker and per tenant (DESIGN.md section 6).
//
// Each session holds at most one reservation: `bytes` on one decode worker, charged to its
// tenant. Reserve sets a session's reservation (moving it between workers if asked) only when both
// the worker's capacity and the tenant's limit have room for the new amount, counting the
// session's current reservation as freed; otherwise it answers RESOURCE_EXHAUSTED naming the limit
// and changes nothing. So reserved bytes never exceed a capacity or a limit, except when a worker
// re-registers with a smaller capacity (then nothing new fits until enough is released).
//
// Not thread-safe: the owner (CoordinatorService) serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace glimpse::coordinator {

struct Reservation {
  std::string worker;
  std::string tenant;
  int64_t bytes = 0;
};

class BudgetLedger {
 public:
  // `default_tenant_limit` applies to tenants without an explicit limit; <= 0: unlimited.
  explicit BudgetLedger(int64_t default_tenant_limit)
      : default_tenant_limit_(default_tenant_limit) {}

  void SetWorkerCapacity(const std::string& worker, int64_t capacity_bytes);
  // Drops the worker and every reservation on it; returns the sessions that had one.
  std::vector<std::string> RemoveWorker(const std::string& worker);
  void SetTenantLimit(const std::string& tenant, int64_t limit_bytes);

  absl::Status Reserve(const std::string& session, const std::string& worker,
                       const std::string& tenant, int64_t bytes);
  // Returns the bytes released (0 when the session had no reservation).
  int64_t Release(const std::string& session);

  bool HasWorker(const std::string& worker) const { return workers_.count(worker) > 0; }
  int64_t WorkerCapacity(const std::string& worker) const;
  int64_t WorkerReserved(const std::string& worker) const;
  int64_t WorkerFree(const std::string& worker) const;   // capacity - reserved, >= 0
  int64_t TenantLimit(const std::string& tenant) const;  // <= 0: unlimited
  int64_t TenantReserved(const std::string& tenant) const;
  const Reservation* Find(const std::string& session) const;
  const std::map<std::string, Reservation>& reservations() const { return reservations_; }
  int64_t TotalReserved() const;
  int64_t TotalCapacity() const;

  // Recomputes the totals from the reservations and compares; for tests and assertions.
  bool CheckInvariants(std::string* why) const;

 private:
  struct Worker {
    int64_t capacity = 0;
    int64_t reserved = 0;
  };
  const int64_t default_tenant_limit_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, int64_t> tenant_limits_;
  std::map<std::string, int64_t> tenant_reserved_;
  std::map<std::string, Reservation> reservations_;  // by session
};

}  // namespace glimpse::coordinator
