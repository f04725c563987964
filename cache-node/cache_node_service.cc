// CacheNodeService: lifecycle, the receive thread and the put path. Reads, lookups, pins and
// deletes are in cache_node_read.cc.
#include "cache-node/cache_node_service.h"

#include <openssl/rand.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/kvstate/transfer_header.h"

namespace glimpse::cache_node {

namespace {

// 64 bits from OpenSSL's CSPRNG; a process without entropy cannot issue tickets safely.
uint64_t RandomTicket() {
  uint64_t t = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&t), sizeof(t)) != 1) std::abort();
  return t;
}

}  // namespace

using kvstate::Manifest;

const char* MethodName(Method m) {
  switch (m) {
    case Method::kBeginPut:
      return "BeginPut";
    case Method::kCommitPut:
      return "CommitPut";
    case Method::kGet:
      return "Get";
    case Method::kGetMany:
      return "GetMany";
    case Method::kLookup:
      return "Lookup";
    case Method::kPin:
      return "Pin";
    case Method::kUnpin:
      return "Unpin";
    case Method::kDelete:
      return "Delete";
    case Method::kCount:
      break;
  }
  return "?";
}

CacheNodeService::CacheNodeService(const CacheNodeOptions& options,
                                   std::unique_ptr<transport::Transport> t, Clock* clock)
    : options_(options),
      transport_(std::move(t)),
      clock_(clock),
      warm_(options.warm_bytes, options.warm_half_life, clock) {}

absl::StatusOr<std::unique_ptr<CacheNodeService>> CacheNodeService::Create(
    const CacheNodeOptions& options, std::unique_ptr<transport::Transport> transport,
    Clock* clock) {
  if (transport == nullptr || clock == nullptr) {
    return absl::InvalidArgumentError("cache node needs a transport and a clock");
  }
  std::unique_ptr<CacheNodeService> s(new CacheNodeService(options, std::move(transport), clock));
  RETURN_IF_ERROR(s->Load());
  s->receiver_ = std::thread([p = s.get()] { p->ReceiveLoop(); });
  if (options.retention_sweep_interval > absl::ZeroDuration()) {
    s->retention_ = std::thread([p = s.get()] { p->RetentionLoop(); });
  }
  return s;
}

absl::Status CacheNodeService::Load() {
  ASSIGN_OR_RETURN(store_, PageStore::Open(options_.storage));
  absl::ReleasableMutexLock lock(&mu_);
  RETURN_IF_ERROR(store_->ForEachManifest([this](Manifest m) {
    mu_.AssertHeld();  // ForEachManifest calls back synchronously, under `lock`
    index_.Add(m.state_key, StateInfo{m.namespace_key, m.token_count, m.total_page_bytes(),
                                      absl::FromUnixMicros(m.created_unix_micros), false});
  }));
  ASSIGN_OR_RETURN(auto tombstones, store_->LoadTombstones());
  for (const auto& [key, micros] : tombstones) tombstones_[key] = absl::FromUnixMicros(micros);
  ASSIGN_OR_RETURN(std::vector<StateKey> pins, store_->LoadPins());
  std::vector<StateKey> pinned;
  for (const StateKey& k : pins) {
    if (index_.SetPinned(k, true)) pinned.push_back(k);  // a pin of a deleted state is ignored
  }
  const size_t states = index_.size();
  const uint64_t bytes = index_.bytes();
  lock.Release();
  for (const StateKey& k : pinned) {
    absl::StatusOr<std::shared_ptr<const WarmState>> w = LoadWarm(k);
    if (w.ok()) warm_.AdmitPinned(*std::move(w));
  }
  log::Info("cache node store opened", {{"path", options_.storage.path},
                                        {"states", static_cast<long long>(states)},
                                        {"bytes", static_cast<long long>(bytes)},
                                        {"pinned", static_cast<long long>(pinned.size())}});
  return absl::OkStatus();
}

CacheNodeService::~CacheNodeService() { Stop(); }

CacheNodeService::Call::Call(CacheNodeService* s) : s_(s) {
  absl::MutexLock lock(&s->active_mu_);
  ok_ = !s->stopping_.load();
  if (ok_) ++s->active_;
}

CacheNodeService::Call::~Call() {
  if (!ok_) return;
  absl::MutexLock lock(&s_->active_mu_);
  if (--s_->active_ == 0) s_->active_cv_.SignalAll();
}

void CacheNodeService::Stop() {
  {
    absl::MutexLock lock(&active_mu_);
    if (stopping_.exchange(true)) return;
  }
  {
    absl::MutexLock lock(&stop_mu_);  // wakes the retention thread without a race
  }
  stop_cv_.SignalAll();
  {
    absl::MutexLock lock(&pending_mu_);  // CommitPuts waiting for pages return
  }
  pending_cv_.SignalAll();
  if (receiver_.joinable()) receiver_.join();
  if (retention_.joinable()) retention_.join();
  {
    // Calls in flight finish (each is bounded by its deadline) before the store closes.
    absl::MutexLock lock(&active_mu_);
    while (active_ != 0) active_cv_.Wait(&active_mu_);
  }
  absl::MutexLock lock(&mu_);
  store_.reset();
}

void CacheNodeService::Record(Method m, const absl::Status& s) {
  if (!s.ok()) {
    errors_[static_cast<size_t>(m)][static_cast<size_t>(s.code()) % CacheNodeStats::kStatusCodes]
        .fetch_add(1);
  }
}

void CacheNodeService::ReceiveLoop() {
  while (!stopping_.load()) {
    absl::StatusOr<transport::ReceivedBatch> got =
        transport_->Receive(absl::Now() + absl::Milliseconds(100));
    const absl::Time now = clock_->Now();
    absl::MutexLock lock(&pending_mu_);
    // Expire unclaimed tickets (a claimed one is owned by its CommitPut, which has a deadline).
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->second.claimed && now - it->second.created > options_.ticket_timeout) {
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    if (!got.ok()) {
      if (got.status().code() != absl::StatusCode::kDeadlineExceeded) {
        log::Warning("cache node: a page batch failed", {{"error", got.status().ToString()}});
        dropped_batches_.fetch_add(1);
      }
      continue;
    }
    const auto& bufs = got->buffers();
    absl::StatusOr<kvstate::BatchHeader> h = bufs.empty()
                                                 ? absl::InvalidArgumentError("empty batch")
                                                 : kvstate::DecodeBatchHeader(bufs[0]);
    auto it = h.ok() && h->kind == kvstate::BatchKind::kPut ? pending_.find(h->id) : pending_.end();
    if (it == pending_.end() || it->second.batch.has_value()) {
      dropped_batches_.fetch_add(1);
      log::Warning("cache node: dropped a page batch with no open ticket",
                   {{"error", h.ok() ? absl::StrCat("ticket ", h->id) : h.status().ToString()}});
      continue;
    }
    if (!it->second.sender.empty() && got->sender_address() != it->second.sender) {
      dropped_batches_.fetch_add(1);
      log::Warning("cache node: dropped a page batch from an engine other than its put's sender",
                   {{"from", transport::DescribeAddress(got->sender_address())},
                    {"sender", transport::DescribeAddress(it->second.sender)}});
      continue;
    }
    it->second.batch = std::move(got);
    pending_cv_.SignalAll();
  }
}

void CacheNodeService::RetentionLoop() {
  while (true) {
    {
      // stopping_ is checked under stop_mu_ before each wait, so Stop's wake-up is not lost.
      absl::MutexLock lock(&stop_mu_);
      if (stopping_.load()) return;
      stop_cv_.WaitWithTimeout(&stop_mu_, options_.retention_sweep_interval);
      if (stopping_.load()) return;
    }
    if (absl::Status s = RunRetention(); !s.ok()) {
      log::Warning("cache node: retention pass failed", {{"error", s.ToString()}});
    }
  }
}

absl::StatusOr<PutTicket> CacheNodeService::BeginPut(Manifest m, std::span<const int32_t> tokens,
                                                     std::string_view sender_address, bool copy) {
  absl::StatusOr<PutTicket> result = [&]() -> absl::StatusOr<PutTicket> {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    if (options_.peers != nullptr && !options_.peers->Allows(sender_address)) {
      return absl::PermissionDeniedError(
          absl::StrCat("put from ", transport::DescribeAddress(sender_address),
                       ", which is not a registered peer (the sending node must register its "
                       "transport addresses with the coordinator)"));
    }
    RETURN_IF_ERROR(kvstate::ValidateManifest(m, options_.limits));
    if (tokens.size() > options_.max_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "put of ", tokens.size(), " tokens exceeds the limit of ", options_.max_tokens));
    }
    if (!copy && tokens.size() != m.token_count) {
      return absl::InvalidArgumentError(absl::StrCat("manifest token_count ", m.token_count,
                                                     " differs from the ", tokens.size(),
                                                     " tokens sent"));
    }
    if (!copy && kvstate::MakeStateKey(m.namespace_key, tokens) != m.state_key) {
      return absl::InvalidArgumentError(
          absl::StrCat("state key ", kvpage::ToHex(m.state_key),
                       " is not the hash of the namespace key and the tokens sent"));
    }
    PutTicket t;
    t.transport_address = transport_->LocalAddress();
    bool stored;
    absl::Time deleted = absl::InfinitePast();
    {
      absl::ReaderMutexLock lock(&mu_);
      stored = index_.Find(m.state_key) != nullptr;
      if (auto it = tombstones_.find(m.state_key); it != tombstones_.end()) deleted = it->second;
    }
    if (copy && deleted >= absl::FromUnixMicros(m.created_unix_micros)) {
      return absl::FailedPreconditionError(
          absl::StrCat("state ", kvpage::ToHex(m.state_key), " was deleted on this node at ",
                       absl::FormatTime(deleted), ", after this copy was made; refused"));
    }
    if (stored) {
      ASSIGN_OR_RETURN(Manifest old, store_->ReadManifest(m.state_key));
      if (!old.SameContent(m)) {
        return absl::AlreadyExistsError(absl::StrCat(
            "state ", kvpage::ToHex(m.state_key),
            " is already stored with a different payload (manifest differs); delete it first"));
      }
      // Same manifest (every page's size and CRC32C): the bytes are still shipped and compared
      // at CommitPut, so an identical manifest over different bytes cannot pass as a duplicate.
    }
    absl::MutexLock lock(&pending_mu_);
    if (pending_.size() >= options_.max_pending_puts) {
      return absl::ResourceExhaustedError(
          absl::StrCat(pending_.size(), " puts are already waiting for pages (limit ",
                       options_.max_pending_puts, ")"));
    }
    do {
      t.ticket = RandomTicket();
    } while (t.ticket == 0 || pending_.contains(t.ticket));
    pending_.emplace(t.ticket, Pending{std::move(m), std::string(sender_address), clock_->Now(),
                                       copy, false, std::nullopt});
    return t;
  }();
  Record(Method::kBeginPut, result.status());
  return result;
}

absl::StatusOr<transport::ReceivedBatch> CacheNodeService::AwaitBatch(uint64_t ticket,
                                                                      absl::Time deadline,
                                                                      Manifest* manifest,
                                                                      bool* copy) {
  deadline = std::min(deadline, absl::Now() + options_.ticket_timeout);  // a bounded hold
  absl::MutexLock lock(&pending_mu_);
  auto it = pending_.find(ticket);
  if (it == pending_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown or expired put ticket ", ticket));
  }
  if (it->second.claimed) {
    return absl::FailedPreconditionError(
        absl::StrCat("put ticket ", ticket, " is already being committed"));
  }
  it->second.claimed = true;
  // Until the batch arrives, the node stops or the deadline passes (the condition is checked
  // once more after a timeout).
  bool timed_out = false;
  while (!timed_out && !stopping_.load() && !pending_.at(ticket).batch.has_value()) {
    timed_out = pending_cv_.WaitWithDeadline(&pending_mu_, deadline);
  }
  const bool arrived = stopping_.load() || pending_.at(ticket).batch.has_value();
  it = pending_.find(ticket);
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (stopping_.load()) return absl::UnavailableError("cache node is stopping");
  if (!arrived) {
    return absl::DeadlineExceededError(
        absl::StrCat("the pages of put ticket ", ticket, " did not arrive before the deadline"));
  }
  *manifest = std::move(p.manifest);
  *copy = p.copy;
  return std::move(*p.batch);
}

absl::StatusOr<CommitResult> CacheNodeService::CommitPut(uint64_t ticket, absl::Time deadline) {
  absl::StatusOr<CommitResult> result = VerifyAndCommit(ticket, deadline);
  Record(Method::kCommitPut, result.status());
  return result;
}

absl::StatusOr<CommitResult> CacheNodeService::VerifyAndCommit(uint64_t ticket,
                                                               absl::Time deadline) {
  Call call(this);
  if (!call.ok()) return absl::UnavailableError("cache node is stopping");
  Manifest m;
  bool copy = false;
  ASSIGN_OR_RETURN(transport::ReceivedBatch batch, AwaitBatch(ticket, deadline, &m, &copy));
  const auto& bufs = batch.buffers();
  ASSIGN_OR_RETURN(const kvstate::BatchHeader h, kvstate::DecodeBatchHeader(bufs[0]));
  std::vector<uint32_t> sizes;
  for (const kvstate::PageRef& p : m.pages) sizes.push_back(p.bytes);
  absl::StatusOr<std::vector<std::span<const uint8_t>>> unpacked =
      kvstate::UnpackPages(h, std::span<const std::span<const uint8_t>>(bufs).subspan(1), sizes);
  if (!unpacked.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("put ticket ", ticket, ": ", unpacked.status().message()));
  }
  std::span<const std::span<const uint8_t>> pages(*unpacked);
  for (size_t i = 0; i < pages.size(); ++i) {
    RETURN_IF_ERROR(kvstate::CheckPage(m, m.pages[i], pages[i], /*full_decode=*/true));
  }
  // A client's put is created now, whatever was deleted before. A copy keeps the time the state
  // got where a client stored it, which tombstones are compared with, here again (a delete may
  // have come since BeginPut) and by replicators.
  if (copy) {
    absl::ReaderMutexLock lock(&mu_);
    if (auto t = tombstones_.find(m.state_key);
        t != tombstones_.end() && t->second >= absl::FromUnixMicros(m.created_unix_micros)) {
      return absl::FailedPreconditionError(
          absl::StrCat("state ", kvpage::ToHex(m.state_key), " was deleted on this node at ",
                       absl::FormatTime(t->second), ", after this copy was stored; refused"));
    }
  } else {
    m.created_unix_micros = absl::ToUnixMicros(clock_->Now());
  }
  return CommitVerified(m, pages);
}

absl::StatusOr<CommitResult> CacheNodeService::CheckDuplicate(
    const Manifest& m, std::span<const std::span<const uint8_t>> pages) {
  ASSIGN_OR_RETURN(StoredPages stored, store_->Read(m.state_key));
  const auto differ = [&](const std::string& why) {
    return absl::AlreadyExistsError(absl::StrCat("state ", kvpage::ToHex(m.state_key),
                                                 " is already stored with a different payload (",
                                                 why, "); delete it first"));
  };
  if (!stored.manifest.SameContent(m)) return differ("manifest differs");
  for (size_t i = 0; i < pages.size(); ++i) {
    const rocksdb::PinnableSlice& b = stored.bytes[i];
    if (b.size() != pages[i].size() || std::memcmp(b.data(), pages[i].data(), b.size()) != 0) {
      return differ(absl::StrCat("page ", kvstate::PageName(m.pages[i]), " differs"));
    }
  }
  duplicate_puts_.fetch_add(1);
  return CommitResult{true, stored.manifest.created_unix_micros};
}

absl::StatusOr<CommitResult> CacheNodeService::CommitVerified(
    const Manifest& m, std::span<const std::span<const uint8_t>> pages) {
  const uint64_t bytes = m.total_page_bytes();
  std::vector<Manifest> victims;
  std::vector<std::pair<StateKey, StateInfo>> removed;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (index_.Find(m.state_key) != nullptr) {
      lock.Release();
      return CheckDuplicate(m, pages);
    }
    if (committing_.count(m.state_key) > 0) {
      return absl::AbortedError(
          absl::StrCat("a put of state ", kvpage::ToHex(m.state_key), " is in progress; retry"));
    }
    ASSIGN_OR_RETURN(std::vector<StateKey> plan,
                     index_.PlanPut(bytes, reserved_bytes_, clock_->Now(), options_.retention));
    for (const StateKey& k : plan) {
      ASSIGN_OR_RETURN(Manifest v, store_->ReadManifest(k));
      victims.push_back(std::move(v));
    }
    for (const StateKey& k : plan) {  // out of the index now; back in if the write fails
      removed.emplace_back(k, *index_.Find(k));
      index_.Remove(k);
      warm_.Erase(k);
    }
    committing_.insert(m.state_key);
    reserved_bytes_ += bytes;
  }
  absl::Status s = store_->Commit(m, pages, victims);
  {
    absl::MutexLock lock(&mu_);
    committing_.erase(m.state_key);
    reserved_bytes_ -= bytes;
    if (s.ok()) {
      index_.Add(m.state_key, StateInfo{m.namespace_key, m.token_count, bytes,
                                        absl::FromUnixMicros(m.created_unix_micros), false});
      tombstones_.erase(m.state_key);  // the store dropped it in the same batch
    } else {
      for (const auto& [k, info] : removed) index_.Add(k, info);  // the batch changed nothing
    }
  }
  if (!s.ok()) {
    log::Error("cache node: put failed", {{"error", s.ToString()}});
    return s;
  }
  retention_deleted_.fetch_add(victims.size());
  puts_.fetch_add(1);
  bytes_put_.fetch_add(bytes);
  if (bytes <= warm_.budget_bytes()) AdmitIfCurrent(WarmState::Make(m, pages));
  return CommitResult{false, m.created_unix_micros};
}

}  // namespace glimpse::cache_node
