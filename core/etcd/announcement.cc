#include "core/etcd/announcement.h"

#include <utility>

#include "core/common/log.h"

namespace glimpse::etcd {

absl::StatusOr<std::unique_ptr<Announcement>> Announcement::Start(EtcdClient* client,
                                                                  std::string key,
                                                                  std::string value,
                                                                  absl::Duration ttl) {
  if (key.empty() || ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("etcd announcement: needs a key and a ttl of at least 1s");
  }
  return std::unique_ptr<Announcement>(
      new Announcement(client, std::move(key), std::move(value), ttl));
}

Announcement::Announcement(EtcdClient* client, std::string key, std::string value,
                           absl::Duration ttl)
    : client_(client), key_(std::move(key)), value_(std::move(value)), ttl_(ttl), thread_([this] {
        Loop();
      }) {}

Announcement::~Announcement() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  thread_.join();
}

bool Announcement::announced() const {
  absl::MutexLock lock(&mu_);
  return announced_;
}

int64_t Announcement::leases() const {
  absl::MutexLock lock(&mu_);
  return leases_;
}

bool Announcement::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time until = absl::Now() + d;
  while (!stopping_ && absl::Now() < until) stop_cv_.WaitWithDeadline(&mu_, until);
  return !stopping_;
}

int64_t Announcement::Put() {
  absl::StatusOr<EtcdClient::Lease> lease = client_->GrantLease(ttl_);
  absl::Status put = lease.status();
  if (put.ok()) put = client_->Put(key_, value_, lease->id);
  if (!put.ok()) {
    log::Warning("etcd announcement: not announced yet",
                 {{"key", key_}, {"error", put.ToString()}});
    if (lease.ok()) (void)client_->RevokeLease(lease->id);  // best effort; it expires anyway
    return 0;
  }
  absl::MutexLock lock(&mu_);
  announced_ = true;
  ++leases_;
  return lease->id;
}

void Announcement::SetAnnounced(bool announced) {
  absl::MutexLock lock(&mu_);
  announced_ = announced;
}

bool Announcement::Renew(int64_t lease) {
  const absl::StatusOr<absl::Duration> left = client_->KeepAlive(lease);
  if (absl::IsNotFound(left.status())) {  // expired: the key is gone, announce it again
    log::Warning("etcd announcement: the lease expired, announcing again", {{"key", key_}});
    SetAnnounced(false);
    return false;
  }
  if (!left.ok()) {
    log::Warning("etcd announcement: a renewal failed",
                 {{"key", key_}, {"error", left.status().ToString()}});
    SetAnnounced(false);
    return true;
  }
  absl::StatusOr<std::optional<EtcdClient::Versioned>> held = client_->Get(key_);
  if (!held.ok()) return true;  // etcd went away between the two calls: the next round sees
  if (!held->has_value()) {
    log::Warning("etcd announcement: the key was deleted, announcing again", {{"key", key_}});
    const absl::Status put = client_->Put(key_, value_, lease);
    SetAnnounced(put.ok());
    return true;
  }
  if ((*held)->lease != lease) {
    log::Error("etcd announcement: another process announces the same key",
               {{"key", key_}, {"value", (*held)->value}});
    SetAnnounced(false);
    return true;
  }
  SetAnnounced(true);
  return true;
}

void Announcement::Loop() {
  int64_t lease = 0;
  while (Sleep(lease == 0 ? absl::ZeroDuration() : ttl_ / 3)) {
    if (lease == 0) {
      lease = Put();
      if (lease == 0 && !Sleep(ttl_ / 3)) break;
      continue;
    }
    if (!Renew(lease)) lease = 0;
  }
  if (lease != 0) {
    if (absl::Status st = client_->RevokeLease(lease); !st.ok()) {
      log::Warning("etcd announcement: the key stays until its lease expires",
                   {{"key", key_}, {"error", st.ToString()}});
    }
  }
}

}  // namespace glimpse::etcd
