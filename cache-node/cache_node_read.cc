// CacheNodeService: Get, Lookup, Pin / Unpin, Delete, retention and Stats.
#include <algorithm>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cache-node/cache_node_service.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/kvstate/transfer_header.h"

namespace glimpse::cache_node {

using kvstate::Manifest;

namespace {

// Indices of `want` in m.pages (sorted, as the manifest), InvalidArgument for a page not there.
absl::StatusOr<std::vector<size_t>> Select(const Manifest& m, const std::vector<PageId>& want) {
  std::vector<size_t> out;
  if (want.empty()) {
    out.resize(m.pages.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = i;
    return out;
  }
  for (const PageId& p : want) {
    auto it =
        std::lower_bound(m.pages.begin(), m.pages.end(), p, [](const auto& ref, const PageId& k) {
          return std::tie(ref.layer, ref.kv_head, ref.index) <
                 std::tie(k.layer, k.kv_head, k.index);
        });
    if (it == m.pages.end() || it->layer != p.layer || it->kv_head != p.kv_head ||
        it->index != p.index) {
      return absl::InvalidArgumentError(absl::StrCat("state ", kvpage::ToHex(m.state_key),
                                                     " has no page (layer ", p.layer, ", kv_head ",
                                                     p.kv_head, ", index ", p.index, ")"));
    }
    out.push_back(static_cast<size_t>(it - m.pages.begin()));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// What a get, pin or delete of a key that is not stored, or not in the caller's namespace, gets:
// the two look the same, so a key reveals nothing to another namespace.
absl::Status NotStored(const StateKey& key) {
  return absl::NotFoundError(absl::StrCat("no state stored under key ", kvpage::ToHex(key)));
}

absl::Status CheckNamespace(const Manifest& m, const NamespaceKey& ns) {
  return m.namespace_key == ns ? absl::OkStatus() : NotStored(m.state_key);
}

absl::Status CheckModel(const Manifest& m, const kvstate::Fingerprint& expected) {
  if (m.model == expected) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "state ", kvpage::ToHex(m.state_key), " was made by model ", kvpage::ToHex(m.model),
      ", the request expects model ", kvpage::ToHex(expected)));
}

// Charges the selected pages' bytes to `*budget` (what is left of `limit` for this request).
absl::Status Charge(const Manifest& m, const std::vector<size_t>& selected, uint64_t limit,
                    uint64_t* budget) {
  uint64_t bytes = 0;
  for (size_t i : selected) bytes += m.pages[i].bytes;
  if (bytes > *budget) {
    return absl::InvalidArgumentError(
        absl::StrCat("the get asks for more than ", limit,
                     " page bytes in all (put.max_state_bytes); state ", kvpage::ToHex(m.state_key),
                     " adds ", bytes, " with ", *budget, " left: split the request"));
  }
  *budget -= bytes;
  return absl::OkStatus();
}

// `pages` copied back to back into one new buffer; `pins[i]` (if given) is released once page i
// is copied, so RocksDB's blocks and the copy are not all held at once.
std::unique_ptr<uint8_t[]> Pack(std::span<const std::span<const uint8_t>> pages,
                                std::vector<rocksdb::PinnableSlice>* pins) {
  size_t total = 0;
  for (const auto& p : pages) total += p.size();
  auto out = std::make_unique_for_overwrite<uint8_t[]>(total);
  size_t off = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    std::memcpy(out.get() + off, pages[i].data(), pages[i].size());
    off += pages[i].size();
    if (pins != nullptr) (*pins)[i].Reset();
  }
  return out;
}

Manifest Restrict(const Manifest& m, const std::vector<size_t>& selected) {
  Manifest out = m;
  out.pages.clear();
  for (size_t i : selected) out.pages.push_back(m.pages[i]);
  return out;
}

}  // namespace

absl::Status CacheNodeService::Ship(const std::string& address, uint64_t request_id,
                                    uint32_t page_count,
                                    std::span<const std::span<const uint8_t>> buffers, bool packed,
                                    absl::Time deadline) {
  transport::PeerId peer;
  {
    absl::MutexLock lock(&peers_mu_);
    auto it = peers_.find(address);
    if (it == peers_.end()) {
      ASSIGN_OR_RETURN(peer, transport_->Connect(address));
      peers_.emplace(address, peer);
    } else {
      peer = it->second;
    }
  }
  const auto header =
      kvstate::EncodeBatchHeader({kvstate::BatchKind::kGetReply, request_id, page_count,
                                  packed ? kvstate::BatchHeader::kPacked : 0u});
  std::vector<std::span<const uint8_t>> bufs;
  bufs.reserve(buffers.size() + 1);
  bufs.emplace_back(header);
  bufs.insert(bufs.end(), buffers.begin(), buffers.end());
  transport::SubmitOptions so;
  so.deadline = std::min(deadline, absl::Now() + options_.transfer_timeout);
  so.checksum = false;  // the client checks every page's CRC32C against the manifest
  absl::StatusOr<transport::TransferId> id = transport_->Submit(peer, bufs, so);
  absl::Status s = id.ok() ? transport_->Wait(*id, so.deadline + absl::Seconds(5)) : id.status();
  if (!s.ok() && s.code() != absl::StatusCode::kResourceExhausted) {
    // A failed endpoint is retired by the backend: forget it so the next Get reconnects.
    absl::MutexLock lock(&peers_mu_);
    auto it = peers_.find(address);
    if (it != peers_.end() && it->second == peer) {
      (void)transport_->Disconnect(peer);
      peers_.erase(it);
    }
  }
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("shipping the pages to the client: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const WarmState>> CacheNodeService::LoadWarm(const StateKey& key) {
  ASSIGN_OR_RETURN(StoredPages stored, store_->Read(key));
  std::vector<std::span<const uint8_t>> spans;
  for (size_t i = 0; i < stored.bytes.size(); ++i) {
    spans.emplace_back(reinterpret_cast<const uint8_t*>(stored.bytes[i].data()),
                       stored.bytes[i].size());
    RETURN_IF_ERROR(kvstate::CheckPage(stored.manifest, stored.manifest.pages[i], spans.back(),
                                       /*full_decode=*/false));
  }
  return WarmState::Make(std::move(stored.manifest), spans);
}

void CacheNodeService::AdmitIfCurrent(std::shared_ptr<const WarmState> w) {
  if (w->bytes() > warm_.budget_bytes()) return;
  // Under mu_ (shared), a Delete (exclusive: index and warm tier together) cannot interleave, and
  // the creation time tells a re-put of the same key apart from what was read.
  absl::ReaderMutexLock lock(&mu_);
  const StateInfo* info = index_.Find(w->manifest.state_key);
  if (info == nullptr || info->created != absl::FromUnixMicros(w->manifest.created_unix_micros)) {
    return;
  }
  if (info->pinned) {
    warm_.AdmitPinned(std::move(w));
  } else {
    warm_.Admit(std::move(w));
  }
}

// One item of a get, ready to ship: its result and one buffer holding its pages back to back.
struct CacheNodeService::Served {
  GetResult result;
  std::shared_ptr<const WarmState> warm;  // the warm entry `buffer` lies in, if any
  bool admit = false;                     // `warm` was just read from RocksDB: admit once shipped
  std::unique_ptr<uint8_t[]> copy;        // the pages of a partial or unadmitted state, packed
  std::span<const uint8_t> buffer;        // what ships: in warm->data or in copy
};

absl::StatusOr<CacheNodeService::Served> CacheNodeService::Serve(const GetItem& item,
                                                                 uint64_t* budget) {
  std::shared_ptr<const WarmState> w = warm_.Get(item.key);
  if (w == nullptr) return ServeCold(item, budget);
  RETURN_IF_ERROR(CheckNamespace(w->manifest, item.ns));
  RETURN_IF_ERROR(CheckModel(w->manifest, item.expected_model));
  ASSIGN_OR_RETURN(std::vector<size_t> sel, Select(w->manifest, item.pages));
  RETURN_IF_ERROR(Charge(w->manifest, sel, options_.limits.max_state_bytes, budget));
  Served s;
  s.result = {Restrict(w->manifest, sel), true};
  if (sel.size() == w->manifest.pages.size()) {
    s.buffer = w->packed();  // uncopied
  } else {
    std::vector<std::span<const uint8_t>> spans;
    for (size_t i : sel) spans.push_back(w->page(i));
    s.copy = Pack(spans, nullptr);
    s.buffer = {s.copy.get(), s.result.manifest.total_page_bytes()};
  }
  s.warm = std::move(w);
  return s;
}

absl::StatusOr<CacheNodeService::Served> CacheNodeService::ServeCold(const GetItem& item,
                                                                     uint64_t* budget) {
  ASSIGN_OR_RETURN(
      StoredPages stored,
      store_->Read(
          item.key,
          [&](const Manifest& m) -> absl::StatusOr<std::vector<size_t>> {
            RETURN_IF_ERROR(CheckNamespace(m, item.ns));
            RETURN_IF_ERROR(CheckModel(m, item.expected_model));
            ASSIGN_OR_RETURN(std::vector<size_t> sel, Select(m, item.pages));
            RETURN_IF_ERROR(Charge(m, sel, options_.limits.max_state_bytes, budget));
            return sel;
          },
          /*fill_cache=*/!item.pages.empty()));  // a whole state goes to the warm tier instead
  // Sizes only: see the header on why page CRC32Cs are not recomputed here.
  std::vector<std::span<const uint8_t>> spans;
  for (size_t i = 0; i < stored.selected.size(); ++i) {
    const kvstate::PageRef& ref = stored.manifest.pages[stored.selected[i]];
    if (stored.bytes[i].size() != ref.bytes) {
      return absl::DataLossError(
          absl::StrCat("state ", kvpage::ToHex(item.key), ": page ", kvstate::PageName(ref), " is ",
                       stored.bytes[i].size(), " bytes in RocksDB, the manifest says ", ref.bytes));
    }
    spans.emplace_back(reinterpret_cast<const uint8_t*>(stored.bytes[i].data()), ref.bytes);
  }
  Served s;
  s.result = {Restrict(stored.manifest, stored.selected), false};
  const size_t total = s.result.manifest.total_page_bytes();
  if (stored.selected.size() == stored.manifest.pages.size() && total <= warm_.budget_bytes()) {
    // Packed once: shipped from, then kept by the warm tier.
    std::shared_ptr<WarmState> w = WarmState::Make(std::move(stored.manifest), spans);
    s.buffer = w->packed();
    s.warm = std::move(w);
    s.admit = true;
  } else {
    s.copy = Pack(spans, &stored.bytes);  // unpins each RocksDB block once copied
    s.buffer = {s.copy.get(), total};
  }
  return s;
}

absl::StatusOr<std::vector<GetResult>> CacheNodeService::GetItems(std::span<const GetItem> items,
                                                                  const std::string& reply_address,
                                                                  uint64_t request_id,
                                                                  absl::Time deadline) {
  if (reply_address.empty()) return absl::InvalidArgumentError("get without a reply address");
  uint64_t budget = options_.limits.max_state_bytes;
  std::vector<Served> served;
  served.reserve(items.size());
  std::vector<std::span<const uint8_t>> buffers;
  uint64_t pages = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::StatusOr<Served> s = Serve(items[i], &budget);
    if (!s.ok() && items.size() > 1) {
      return absl::Status(s.status().code(),
                          absl::StrCat("get item ", i, ": ", s.status().message()));
    }
    if (!s.ok()) return s.status();
    pages += s->result.manifest.pages.size();
    buffers.push_back(s->buffer);
    served.push_back(*std::move(s));
  }
  RETURN_IF_ERROR(Ship(reply_address, request_id, static_cast<uint32_t>(pages), buffers,
                       /*packed=*/true, deadline));
  std::vector<GetResult> out;
  out.reserve(served.size());
  for (Served& s : served) {
    if (s.admit) AdmitIfCurrent(std::move(s.warm));
    bytes_got_.fetch_add(s.result.manifest.total_page_bytes());
    out.push_back(std::move(s.result));
  }
  gets_.fetch_add(out.size());
  return out;
}

absl::StatusOr<GetResult> CacheNodeService::Get(const GetRequest& req, absl::Time deadline) {
  absl::StatusOr<GetResult> result = [&]() -> absl::StatusOr<GetResult> {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    const GetItem item{req.key, req.ns, req.expected_model, req.pages};
    ASSIGN_OR_RETURN(std::vector<GetResult> out,
                     GetItems({&item, 1}, req.reply_address, req.request_id, deadline));
    return std::move(out[0]);
  }();
  Record(Method::kGet, result.status());
  return result;
}

absl::StatusOr<std::vector<GetResult>> CacheNodeService::GetMany(const GetManyRequest& req,
                                                                 absl::Time deadline) {
  absl::StatusOr<std::vector<GetResult>> result = [&]() -> absl::StatusOr<std::vector<GetResult>> {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    if (req.items.empty() || req.items.size() > kMaxGetItems) {
      return absl::InvalidArgumentError(absl::StrCat("a batched get takes 1 to ", kMaxGetItems,
                                                     " states, not ", req.items.size()));
    }
    return GetItems(req.items, req.reply_address, req.request_id, deadline);
  }();
  Record(Method::kGetMany, result.status());
  return result;
}

absl::StatusOr<LookupResult> CacheNodeService::Lookup(const NamespaceKey& ns,
                                                      std::span<const int32_t> tokens) {
  absl::StatusOr<LookupResult> result = [&]() -> absl::StatusOr<LookupResult> {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    if (tokens.size() > options_.max_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lookup of ", tokens.size(), " tokens exceeds the limit of ", options_.max_tokens));
    }
    LookupResult out;
    {
      absl::ReaderMutexLock lock(&mu_);
      std::optional<StateIndex::Match> m = index_.LongestPrefix(ns, tokens);
      if (m.has_value()) {
        const StateInfo* info = index_.Find(m->key);
        out = LookupResult{true, m->key, m->token_count, info->bytes, info->pinned, false};
      }
    }
    lookups_.fetch_add(1);
    if (out.found) {
      out.warm = warm_.Contains(out.key);
      lookup_hits_.fetch_add(1);
    }
    return out;
  }();
  Record(Method::kLookup, result.status());
  return result;
}

absl::StatusOr<bool> CacheNodeService::PinnedIfStored(const NamespaceKey& ns,
                                                      const StateKey& key) const {
  absl::ReaderMutexLock lock(&mu_);
  const StateInfo* info = index_.Find(key);
  if (info == nullptr || info->ns != ns) return NotStored(key);
  return info->pinned;
}

kvstate::Held CacheNodeService::Holds(const NamespaceKey& ns, const StateKey& key) const {
  absl::ReaderMutexLock lock(&mu_);
  kvstate::Held held;
  const StateInfo* info = index_.Find(key);
  held.stored = info != nullptr && info->ns == ns;
  if (auto it = tombstones_.find(key); it != tombstones_.end()) {
    held.deleted_unix_micros = absl::ToUnixMicros(it->second);
  }
  return held;
}

absl::Status CacheNodeService::ForEachManifest(const std::function<void(Manifest)>& fn) {
  Call call(this);
  if (!call.ok()) return absl::UnavailableError("cache node is stopping");
  return store_->ForEachManifest(fn);
}

absl::StatusOr<std::pair<Manifest, std::vector<std::string>>> CacheNodeService::ReadState(
    const StateKey& key) {
  Call call(this);
  if (!call.ok()) return absl::UnavailableError("cache node is stopping");
  ASSIGN_OR_RETURN(Manifest m, store_->ReadManifest(key));
  ASSIGN_OR_RETURN(StoredPages read, store_->Read(key));
  std::vector<std::string> pages;
  for (const rocksdb::PinnableSlice& b : read.bytes) pages.push_back(b.ToString());
  return std::make_pair(std::move(m), std::move(pages));
}

absl::Status CacheNodeService::Pin(const NamespaceKey& ns, const StateKey& key) {
  absl::Status s = [&]() -> absl::Status {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    absl::MutexLock admin(&admin_mu_);
    RETURN_IF_ERROR(PinnedIfStored(ns, key).status());
    RETURN_IF_ERROR(WithinPinQuota(key));
    RETURN_IF_ERROR(store_->SetPinned(key, true));
    {
      absl::MutexLock lock(&mu_);
      if (!index_.SetPinned(key, true)) {  // displaced by a concurrent put's retention
        return absl::NotFoundError(
            absl::StrCat("state ", kvpage::ToHex(key), " was dropped while being pinned"));
      }
    }
    if (!warm_.SetPinned(key, true)) {
      ASSIGN_OR_RETURN(std::shared_ptr<const WarmState> w, LoadWarm(key));
      warm_.AdmitPinned(std::move(w));  // may not fit: the state stays pinned in the cold tier
    }
    return absl::OkStatus();
  }();
  Record(Method::kPin, s);
  return s;
}

absl::Status CacheNodeService::WithinPinQuota(const StateKey& key) const {
  const uint64_t limit = options_.max_pinned_bytes_per_namespace;
  absl::ReaderMutexLock lock(&mu_);
  const StateInfo* info = index_.Find(key);
  if (limit == 0 || info == nullptr || info->pinned) return absl::OkStatus();
  const uint64_t pinned = index_.pinned_bytes(info->ns);
  if (pinned + info->bytes <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("pinning state ", kvpage::ToHex(key), " (", info->bytes, " bytes) would put ",
                   pinned + info->bytes, " pinned bytes in its namespace, past the limit of ",
                   limit, " (pin.max_bytes_per_namespace); unpin others first"));
}

absl::Status CacheNodeService::Unpin(const NamespaceKey& ns, const StateKey& key) {
  absl::Status s = [&]() -> absl::Status {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    absl::MutexLock admin(&admin_mu_);
    RETURN_IF_ERROR(PinnedIfStored(ns, key).status());
    RETURN_IF_ERROR(store_->SetPinned(key, false));
    absl::MutexLock lock(&mu_);
    index_.SetPinned(key, false);
    warm_.SetPinned(key, false);
    return absl::OkStatus();
  }();
  Record(Method::kUnpin, s);
  return s;
}

void CacheNodeService::DeleteFromIndexes(const std::vector<Manifest>& states) {
  absl::MutexLock lock(&mu_);
  for (const Manifest& m : states) {
    index_.Remove(m.state_key);
    warm_.Erase(m.state_key);
  }
}

absl::Status CacheNodeService::Delete(const NamespaceKey& ns, const StateKey& key) {
  const bool tombstones = options_.tombstone_ttl > absl::ZeroDuration();
  return Remove(ns, key, tombstones ? std::optional<absl::Time>(clock_->Now()) : std::nullopt,
                std::nullopt);
}

absl::Status CacheNodeService::DropCopy(const NamespaceKey& ns, const StateKey& key) {
  return Remove(ns, key, std::nullopt, std::nullopt);
}

absl::Status CacheNodeService::FollowDelete(const NamespaceKey& ns, const StateKey& key,
                                            int64_t created_unix_micros, absl::Time deleted) {
  return Remove(ns, key, deleted, created_unix_micros);
}

absl::Status CacheNodeService::Remove(const NamespaceKey& ns, const StateKey& key,
                                      std::optional<absl::Time> tombstone,
                                      std::optional<int64_t> created) {
  absl::Status s = [&]() -> absl::Status {
    Call call(this);
    if (!call.ok()) return absl::UnavailableError("cache node is stopping");
    absl::MutexLock admin(&admin_mu_);
    absl::StatusOr<bool> pinned = PinnedIfStored(ns, key);
    if (absl::IsNotFound(pinned.status()) && tombstone.has_value()) {
      // Not held here: the tombstone still refuses a copy stored before the delete, in flight or
      // to come (unless the key is stored under another namespace: a malformed request).
      bool other = false;
      {
        absl::ReaderMutexLock lock(&mu_);
        other = index_.Find(key) != nullptr;
      }
      if (!other) {
        RETURN_IF_ERROR(store_->AddTombstone(key, absl::ToUnixMicros(*tombstone)));
        absl::MutexLock lock(&mu_);
        absl::Time& at = tombstones_[key];
        at = std::max(at, *tombstone);
      }
    }
    RETURN_IF_ERROR(pinned.status());
    if (*pinned) {
      return absl::FailedPreconditionError(
          absl::StrCat("state ", kvpage::ToHex(key), " is pinned; unpin it first"));
    }
    ASSIGN_OR_RETURN(Manifest m, store_->ReadManifest(key));
    if (created.has_value() && m.created_unix_micros != *created) {
      return absl::FailedPreconditionError(
          absl::StrCat("state ", kvpage::ToHex(key), " was stored again since"));
    }
    std::vector<Manifest> states = {std::move(m)};
    RETURN_IF_ERROR(store_->Delete(
        states, tombstone.has_value() ? std::optional<int64_t>(absl::ToUnixMicros(*tombstone))
                                      : std::nullopt));
    DeleteFromIndexes(states);
    if (tombstone.has_value()) {
      absl::MutexLock lock(&mu_);
      tombstones_[key] = *tombstone;
    }
    deletes_.fetch_add(1);
    return absl::OkStatus();
  }();
  Record(Method::kDelete, s);
  return s;
}

absl::Status CacheNodeService::DropExpiredTombstones() {
  std::vector<StateKey> expired;
  {
    absl::ReaderMutexLock lock(&mu_);
    const absl::Time before = clock_->Now() - options_.tombstone_ttl;
    for (const auto& [key, deleted] : tombstones_) {
      if (deleted < before) expired.push_back(key);
    }
  }
  if (expired.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(store_->DropTombstones(expired));
  absl::MutexLock lock(&mu_);
  for (const StateKey& k : expired) tombstones_.erase(k);
  return absl::OkStatus();
}

absl::Status CacheNodeService::RunRetention() {
  Call call(this);
  if (!call.ok()) return absl::UnavailableError("cache node is stopping");
  absl::MutexLock admin(&admin_mu_);
  RETURN_IF_ERROR(DropExpiredTombstones());
  std::vector<StateKey> expired;
  {
    absl::ReaderMutexLock lock(&mu_);
    expired = index_.Expired(clock_->Now(), options_.retention);
  }
  if (expired.empty()) return absl::OkStatus();
  std::vector<Manifest> states;
  for (const StateKey& k : expired) {
    absl::StatusOr<Manifest> m = store_->ReadManifest(k);
    if (m.ok()) states.push_back(*std::move(m));
  }
  RETURN_IF_ERROR(store_->Delete(states));
  DeleteFromIndexes(states);
  retention_deleted_.fetch_add(states.size());
  log::Info("cache node: retention dropped expired states",
            {{"states", static_cast<long long>(states.size())}});
  return absl::OkStatus();
}

CacheNodeStats CacheNodeService::Stats() {
  CacheNodeStats s;
  Call call(this);
  {
    absl::ReaderMutexLock lock(&mu_);
    s.states = index_.size();
    s.stored_bytes = index_.bytes();
    s.pinned_states = index_.pinned_count();
    s.pinned_bytes = index_.pinned_bytes();
    if (call.ok() && store_) s.storage = store_->GetSizes();
  }
  s.warm = warm_.stats();
  s.warm_budget_bytes = warm_.budget_bytes();
  s.puts = puts_.load();
  s.duplicate_puts = duplicate_puts_.load();
  s.gets = gets_.load();
  s.lookups = lookups_.load();
  s.lookup_hits = lookup_hits_.load();
  s.deletes = deletes_.load();
  s.bytes_put = bytes_put_.load();
  s.bytes_got = bytes_got_.load();
  s.retention_deleted = retention_deleted_.load();
  s.dropped_batches = dropped_batches_.load();
  {
    absl::MutexLock lock(&pending_mu_);
    s.pending_puts = pending_.size();
  }
  for (size_t m = 0; m < errors_.size(); ++m) {
    for (size_t c = 0; c < CacheNodeStats::kStatusCodes; ++c) s.errors[m][c] = errors_[m][c].load();
  }
  s.transport = transport_->GetMetrics();
  return s;
}

}  // namespace glimpse::cache_node
