#include "coordinator/budgets.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace glimpse::coordinator {

void BudgetLedger::SetWorkerCapacity(const std::string& worker, int64_t capacity_bytes) {
  workers_[worker].capacity = capacity_bytes;
}

std::vector<std::string> BudgetLedger::RemoveWorker(const std::string& worker) {
  std::vector<std::string> sessions;
  for (const auto& [session, r] : reservations_) {
    if (r.worker == worker) sessions.push_back(session);
  }
  for (const std::string& s : sessions) Release(s);
  workers_.erase(worker);
  return sessions;
}

void BudgetLedger::SetTenantLimit(const std::string& tenant, int64_t limit_bytes) {
  tenant_limits_[tenant] = limit_bytes;
}

absl::Status BudgetLedger::Reserve(const std::string& session, const std::string& worker,
                                   const std::string& tenant, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("session %s: reservation of %d bytes is negative", session, bytes));
  }
  auto w = workers_.find(worker);
  if (w == workers_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("session %s: unknown decode worker %s", session, worker));
  }
  const Reservation* old = Find(session);
  int64_t freed_on_worker = (old != nullptr && old->worker == worker) ? old->bytes : 0;
  int64_t freed_for_tenant = (old != nullptr && old->tenant == tenant) ? old->bytes : 0;
  int64_t worker_after = w->second.reserved - freed_on_worker + bytes;
  if (worker_after > w->second.capacity && bytes > freed_on_worker) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("decode worker %s has %d of %d bytes free; session %s needs %d", worker,
                        w->second.capacity - w->second.reserved + freed_on_worker,
                        w->second.capacity, session, bytes));
  }
  int64_t limit = TenantLimit(tenant);
  int64_t tenant_after = TenantReserved(tenant) - freed_for_tenant + bytes;
  if (limit > 0 && tenant_after > limit && bytes > freed_for_tenant) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("tenant %s has %d of its %d-byte budget free; session %s needs %d", tenant,
                        limit - TenantReserved(tenant) + freed_for_tenant, limit, session, bytes));
  }
  Release(session);
  workers_[worker].reserved += bytes;
  tenant_reserved_[tenant] += bytes;
  reservations_[session] = Reservation{worker, tenant, bytes};
  return absl::OkStatus();
}

int64_t BudgetLedger::Release(const std::string& session) {
  auto it = reservations_.find(session);
  if (it == reservations_.end()) return 0;
  const Reservation& r = it->second;
  auto w = workers_.find(r.worker);
  if (w != workers_.end()) w->second.reserved -= r.bytes;
  auto t = tenant_reserved_.find(r.tenant);
  if (t != tenant_reserved_.end()) {
    t->second -= r.bytes;
    if (t->second == 0) tenant_reserved_.erase(t);
  }
  int64_t bytes = r.bytes;
  reservations_.erase(it);
  return bytes;
}

int64_t BudgetLedger::WorkerCapacity(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? 0 : it->second.capacity;
}

int64_t BudgetLedger::WorkerReserved(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? 0 : it->second.reserved;
}

int64_t BudgetLedger::WorkerFree(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return 0;
  return std::max<int64_t>(0, it->second.capacity - it->second.reserved);
}

int64_t BudgetLedger::TenantLimit(const std::string& tenant) const {
  auto it = tenant_limits_.find(tenant);
  return it == tenant_limits_.end() ? default_tenant_limit_ : it->second;
}

int64_t BudgetLedger::TenantReserved(const std::string& tenant) const {
  auto it = tenant_reserved_.find(tenant);
  return it == tenant_reserved_.end() ? 0 : it->second;
}

const Reservation* BudgetLedger::Find(const std::string& session) const {
  auto it = reservations_.find(session);
  return it == reservations_.end() ? nullptr : &it->second;
}

int64_t BudgetLedger::TotalReserved() const {
  int64_t total = 0;
  for (const auto& [id, w] : workers_) total += w.reserved;
  return total;
}

int64_t BudgetLedger::TotalCapacity() const {
  int64_t total = 0;
  for (const auto& [id, w] : workers_) total += w.capacity;
  return total;
}

bool BudgetLedger::CheckInvariants(std::string* why) const {
  std::map<std::string, int64_t> per_worker, per_tenant;
  for (const auto& [session, r] : reservations_) {
    per_worker[r.worker] += r.bytes;
    per_tenant[r.tenant] += r.bytes;
  }
  for (const auto& [id, w] : workers_) {
    int64_t sum = per_worker.count(id) ? per_worker.at(id) : 0;
    if (sum != w.reserved) {
      *why =
          absl::StrFormat("worker %s: reserved %d but reservations sum to %d", id, w.reserved, sum);
      return false;
    }
    if (w.reserved > w.capacity) {
      *why = absl::StrFormat("worker %s: reserved %d > capacity %d", id, w.reserved, w.capacity);
      return false;
    }
  }
  for (const auto& [tenant, sum] : per_tenant) {
    if (TenantReserved(tenant) != sum) {
      *why = absl::StrFormat("tenant %s: reserved %d but reservations sum to %d", tenant,
                             TenantReserved(tenant), sum);
      return false;
    }
    int64_t limit = TenantLimit(tenant);
    if (limit > 0 && sum > limit) {
      *why = absl::StrFormat("tenant %s: reserved %d > limit %d", tenant, sum, limit);
      return false;
    }
  }
  return true;
}

}  // namespace glimpse::coordinator
