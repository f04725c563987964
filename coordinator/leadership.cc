#include "coordinator/leadership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cluster/etcd_membership.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::coordinator {

// Members in this order so that the service, which writes to the store, goes first.
struct Leadership::Incumbent {
  std::unique_ptr<StateStore> store;
  std::unique_ptr<CoordinatorService> service;
};

std::unique_ptr<Leadership> Leadership::Sole(std::unique_ptr<StateStore> store,
                                             std::unique_ptr<CoordinatorService> service) {
  std::unique_ptr<Leadership> out(new Leadership());
  {
    absl::MutexLock lock(&out->mu_);  // no other thread sees it yet; the analysis cannot know
    out->incumbent_ = std::make_shared<Incumbent>(Incumbent{std::move(store), std::move(service)});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Leadership>> Leadership::Elected(ElectedOptions options,
                                                                Clock* clock) {
  if (options.store.guard.has_value()) {
    return absl::InvalidArgumentError("leadership: each term sets the store's guard");
  }
  // Renewals every ttl/3 must not wait on one member longer than that.
  etcd::EtcdOptions client = options.store.etcd;
  client.timeout = std::min(client.timeout, options.ttl / 3);
  std::unique_ptr<Leadership> out(new Leadership());
  ASSIGN_OR_RETURN(out->election_client_, etcd::EtcdClient::Create(client));
  out->options_ = std::move(options);
  out->clock_ = clock;
  return out;
}

Leadership::~Leadership() { Stop(); }

absl::Status Leadership::Campaign(const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    if (election_client_ == nullptr || !address_.empty()) {
      return absl::FailedPreconditionError("leadership: campaigns once, and only when elected");
    }
    address_ = address;
  }
  if (!options_.workers_prefix.empty()) {  // before the election: its terms read what it sees
    ASSIGN_OR_RETURN(workers_,
                     etcd::PrefixWatch::Start(
                         election_client_.get(), options_.workers_prefix,
                         [this](const etcd::KeyValues& kv) { OnAnnounced(kv); }, options_.poll));
  }
  etcd::ElectionOptions o{options_.store.prefix + "leader", address, options_.ttl, options_.poll};
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::Election> election,
                   etcd::Election::Start(
                       election_client_.get(), std::move(o),
                       [this](const etcd::Term& term) { return TakeUp(term); },
                       [this](const etcd::Term&) { StepDown(); }));
  absl::MutexLock lock(&mu_);
  election_ = std::move(election);
  return absl::OkStatus();
}

void Leadership::OnAnnounced(const etcd::KeyValues& members) {
  CoordinatorService::Announced workers;
  for (const auto& [key, value] : members) {
    const std::string_view rest = std::string_view(key).substr(options_.workers_prefix.size());
    for (std::string_view role : {"decode/", "prefill/"}) {
      if (!rest.starts_with(role)) continue;
      if (auto worker = cluster::ParseWorkerAnnouncement(rest.substr(role.size()))) {
        workers.insert(*std::move(worker));
      }
    }
  }
  std::shared_ptr<Incumbent> incumbent;
  {
    absl::MutexLock lock(&mu_);
    announced_ = workers;
    incumbent = incumbent_;
  }
  if (incumbent != nullptr) incumbent->service->SetAnnouncedWorkers(workers);
}

absl::Status Leadership::TakeUp(const etcd::Term& term) {
  EtcdStateStoreOptions store_options = options_.store;
  store_options.guard = etcd::EtcdClient::Guard{options_.store.prefix + "leader", term.revision};
  store_options.retry_for = options_.ttl;  // past that, the term is likely over anyway
  ASSIGN_OR_RETURN(std::unique_ptr<EtcdStateStore> store, EtcdStateStore::Create(store_options));
  CoordinatorOptions coordinator = options_.coordinator;
  // This term's only: a failure of an earlier term's service (still finishing a call) must not
  // end a later term.
  coordinator.on_store_failure = [this, revision = term.revision](const absl::Status& failure) {
    log::Error("resigning: the coordinator's state cannot be written",
               {{"error", failure.ToString()}, {"revision", std::to_string(revision)}});
    absl::MutexLock lock(&mu_);
    if (election_ != nullptr) election_->Resign(revision);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorService> service,
                   CoordinatorService::Create(coordinator, clock_, store.get()));
  // The workers announced now are this term's baseline: those that leave later are declared dead.
  // (Outside mu_: a service's store failure takes it. A change meanwhile reaches the new service
  // through OnAnnounced once it is the incumbent.)
  CoordinatorService::Announced baseline;
  {
    absl::MutexLock lock(&mu_);
    baseline = announced_;
  }
  service->SetAnnouncedWorkers(baseline);
  auto incumbent = std::make_shared<Incumbent>(Incumbent{std::move(store), std::move(service)});
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::CancelledError("the coordinator is stopping");
  log::Info("took up a term: state loaded from etcd",
            {{"address", address_}, {"revision", std::to_string(term.revision)}});
  incumbent.swap(incumbent_);  // the earlier one (none: StepDown took it) is dropped outside mu_
  return absl::OkStatus();
}

void Leadership::StepDown() {
  std::shared_ptr<Incumbent> was;  // dropped outside mu_
  absl::MutexLock lock(&mu_);
  was.swap(incumbent_);
  // Calls in flight hold the service until they finish; their writes fail, fenced.
  log::Warning("stepped down: calls are refused until a term is won again",
               {{"address", address_}});
}

void Leadership::Stop() {
  // The term's last writes first, committed while it is held (they are guarded by it); calls
  // meanwhile are refused as by a follower, and no term is taken up any more. Then resign,
  // outside mu_ (TakeUp may be waiting on it). Incumbents are dropped outside mu_ too: a
  // service's destructor may report a store failure, which takes mu_.
  workers_.reset();  // its callback uses this
  std::shared_ptr<Incumbent> was;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    was.swap(incumbent_);
  }
  if (was != nullptr) {
    (void)was->service->Flush();
    (void)was->store->Durable();  // bounded: the store retries for at most the ttl
  }
  std::unique_ptr<etcd::Election> election;
  {
    absl::MutexLock lock(&mu_);
    election.swap(election_);
  }
  if (election != nullptr) election->Stop();
}

absl::StatusOr<std::shared_ptr<CoordinatorService>> Leadership::Current() const {
  absl::MutexLock lock(&mu_);
  if (!stopping_ && incumbent_ != nullptr && (election_ == nullptr || election_->leading())) {
    return std::shared_ptr<CoordinatorService>(incumbent_, incumbent_->service.get());
  }
  const std::string leader = election_ != nullptr ? election_->leader() : "";
  const bool named = !stopping_ && !leader.empty() && leader != address_;
  absl::Status out = absl::UnavailableError(
      absl::StrCat("coordinator ", address_, " is not the leader; ",
                   named ? "the leader is " + leader : "none is elected yet"));
  if (named) out.SetPayload(kLeaderPayload, absl::Cord(leader));
  return out;
}

bool Leadership::leading() const { return Current().ok(); }

int64_t Leadership::terms() const {
  absl::MutexLock lock(&mu_);
  return election_ != nullptr ? election_->terms() : (incumbent_ != nullptr ? 1 : 0);
}

}  // namespace glimpse::coordinator
