#include "core/etcd/election.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "core/common/log.h"

namespace glimpse::etcd {
namespace {

// Terms are reckoned on the monotonic clock, as etcd reckons leases: a step of the wall clock
// (NTP) must not stretch a term past the lease etcd sees.
absl::Time Monotonic() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Election>> Election::Start(
    EtcdClient* client, ElectionOptions options,
    std::function<absl::Status(const Term&)> on_elected,
    std::function<void(const Term&)> on_deposed) {
  if (options.key.empty() || options.value.empty()) {
    return absl::InvalidArgumentError("election: the key and the candidate's value are required");
  }
  if (options.ttl < absl::Seconds(1) || options.poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("election: the ttl must be at least 1s, the poll positive");
  }
  return std::unique_ptr<Election>(
      new Election(client, std::move(options), std::move(on_elected), std::move(on_deposed)));
}

Election::Election(EtcdClient* client, ElectionOptions options,
                   std::function<absl::Status(const Term&)> on_elected,
                   std::function<void(const Term&)> on_deposed)
    : client_(client),
      options_(std::move(options)),
      on_elected_(std::move(on_elected)),
      on_deposed_(std::move(on_deposed)),
      thread_([this] { Loop(); }) {}

Election::~Election() { Stop(); }

void Election::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void Election::Resign(int64_t revision) {
  absl::MutexLock lock(&mu_);
  if (!in_term_ || term_revision_ != revision) return;  // that term is over already
  resigning_ = true;
  stop_cv_.SignalAll();
}

bool Election::leading() const {
  absl::MutexLock lock(&mu_);
  return in_term_ && Monotonic() < valid_until_;
}

std::string Election::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

int64_t Election::terms() const {
  absl::MutexLock lock(&mu_);
  return terms_;
}

bool Election::TakeResignation() {
  absl::MutexLock lock(&mu_);
  return std::exchange(resigning_, false);
}

bool Election::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool Election::SleepUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  for (absl::Time now = Monotonic(); !stopping_ && !resigning_ && now < deadline;
       now = Monotonic()) {
    stop_cv_.WaitWithTimeout(&mu_, deadline - now);
  }
  return !stopping_;
}

void Election::Loop() {
  while (!Stopping()) {
    std::optional<Term> term = Campaign();
    if (!term.has_value()) {
      SleepUntil(Monotonic() + options_.poll);
      continue;
    }
    if (absl::Status st = on_elected_(*term); !st.ok()) {
      log::Error("resigning a won term: could not take it up",
                 {{"key", options_.key}, {"error", st.ToString()}});
      (void)client_->RevokeLease(term->lease);
      SleepUntil(Monotonic() + options_.poll);
      continue;
    }
    const bool stopped = Lead(*term);
    // However the term ended, revoking its lease lets a follower take over at once rather than
    // after the lease's ttl (a lease that expired already is no error).
    if (absl::Status st = client_->RevokeLease(term->lease); !st.ok()) {
      log::Warning("could not revoke the term's lease; it will expire", {{"error", st.ToString()}});
    }
    if (stopped) return;
    log::Warning("no longer the leader", {{"key", options_.key}, {"value", options_.value}});
    on_deposed_(*term);
  }
}

std::optional<Term> Election::Campaign() {
  absl::StatusOr<std::optional<EtcdClient::Versioned>> current = client_->Get(options_.key);
  if (!current.ok()) {
    log::Warning("election: cannot read the leader key", {{"error", current.status().ToString()}});
    return std::nullopt;
  }
  if (current->has_value()) {
    if ((*current)->value == options_.value) {
      // This candidate's value under a lease it does not hold: an earlier incarnation's, dead
      // (values are unique per candidate). Its lease would keep everyone waiting for a ttl.
      log::Warning("election: revoking an earlier incarnation's leader key",
                   {{"key", options_.key}, {"value", options_.value}});
      (void)client_->RevokeLease((*current)->lease);
      return std::nullopt;
    }
    absl::MutexLock lock(&mu_);
    leader_ = (*current)->value;
    return std::nullopt;
  }
  const absl::Time sent = Monotonic();
  absl::StatusOr<EtcdClient::Lease> lease = client_->GrantLease(options_.ttl);
  if (!lease.ok()) {
    log::Warning("election: cannot take a lease", {{"error", lease.status().ToString()}});
    return std::nullopt;
  }
  absl::StatusOr<EtcdClient::Versioned> holder =
      client_->PutIfAbsent(options_.key, options_.value, lease->id);
  const bool won = holder.ok() && holder->lease == lease->id;
  if (!won) (void)client_->RevokeLease(lease->id);  // another won; this lease holds nothing
  if (!holder.ok()) {
    log::Warning("election: cannot put the leader key", {{"error", holder.status().ToString()}});
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  leader_ = holder->value;
  if (!won) return std::nullopt;
  valid_until_ = sent + lease->ttl;
  return Term{holder->create_revision, lease->id};
}

bool Election::Lead(const Term& term) {
  const absl::Duration renew_every = options_.ttl / 3;
  absl::Time next_renewal;
  {
    absl::MutexLock lock(&mu_);
    in_term_ = true;
    term_revision_ = term.revision;
    ++terms_;
    // Counted from the grant, not from now: taking the term up (loading the state) took a while.
    next_renewal = valid_until_ - 2 * renew_every;
  }
  log::Info("leading", {{"key", options_.key},
                        {"value", options_.value},
                        {"revision", std::to_string(term.revision)}});
  bool stopped = false;
  while (true) {
    absl::Time valid_until;
    {
      absl::MutexLock lock(&mu_);
      valid_until = valid_until_;
    }
    if (!SleepUntil(std::min(next_renewal, valid_until))) {
      stopped = true;
      break;
    }
    if (TakeResignation()) break;
    if (Monotonic() >= valid_until) break;  // no renewal answered for a whole ttl
    const absl::Time sent = Monotonic();
    absl::StatusOr<absl::Duration> left = client_->KeepAlive(term.lease);
    if (absl::IsNotFound(left.status())) break;  // expired: etcd deleted the key
    if (!left.ok()) {
      log::Warning("election: cannot renew the lease", {{"error", left.status().ToString()}});
      next_renewal = Monotonic() + std::min(options_.poll, renew_every);
      continue;
    }
    absl::MutexLock lock(&mu_);
    valid_until_ = sent + *left;
    next_renewal = Monotonic() + renew_every;
  }
  absl::MutexLock lock(&mu_);
  in_term_ = false;
  resigning_ = false;
  if (leader_ == options_.value) leader_.clear();
  return stopped;
}

}  // namespace glimpse::etcd
