#include "cache-node/replicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cache_client/placement.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::cache_node {

absl::StatusOr<std::unique_ptr<Replicator>> Replicator::Start(
    ReplicatorOptions options, CacheNodeService* service,
    std::unique_ptr<transport::Transport> transport) {
  if (!options.peers.empty() &&
      std::find(options.peers.begin(), options.peers.end(), options.self) == options.peers.end()) {
    return absl::InvalidArgumentError(absl::StrCat("replication: this node (", options.self,
                                                   ") is not one of replication.peers"));
  }
  if (options.replicas < 1 || options.interval <= absl::ZeroDuration() ||
      options.bytes_per_second < 1) {
    return absl::InvalidArgumentError("replication: replicas, interval and rate must be positive");
  }
  cache_client::CacheClientOptions o;
  o.addresses = options.peers;
  o.tls = options.tls;
  o.timeout = options.timeout;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  transports.push_back(std::move(transport));
  ASSIGN_OR_RETURN(std::unique_ptr<cache_client::CacheClient> client,
                   cache_client::CacheClient::Create(o, std::move(transports)));
  return std::unique_ptr<Replicator>(
      new Replicator(std::move(options), service, std::move(client)));
}

Replicator::Replicator(ReplicatorOptions options, CacheNodeService* service,
                       std::unique_ptr<cache_client::CacheClient> client)
    : options_(std::move(options)), service_(service), client_(std::move(client)) {
  thread_ = std::thread([this] { Loop(); });
}

Replicator::~Replicator() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

absl::Status Replicator::SetPeers(const std::vector<std::string>& peers) {
  const std::vector<std::string> before = client_->nodes();
  if (peers == before) return absl::OkStatus();
  RETURN_IF_ERROR(client_->SetNodes(peers));
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (const std::string& p : before) {
    if (std::find(peers.begin(), peers.end(), p) == peers.end()) away_since_.try_emplace(p, now);
  }
  rescan_ = true;
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::Duration Replicator::Away(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  return now - away_since_.try_emplace(peer, now).first->second;
}

void Replicator::Back(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  away_since_.erase(peer);
}

Replicator::ScanPeers Replicator::PeersForScan() {
  ScanPeers scan;
  scan.addresses = client_->nodes();
  scan.waiting.assign(scan.addresses.size(), false);
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (auto it = away_since_.begin(); it != away_since_.end();) {
    const bool listed =
        std::find(scan.addresses.begin(), scan.addresses.end(), it->first) != scan.addresses.end();
    if (listed) {
      ++it;
    } else if (now - it->second < options_.repair_delay) {  // gone from the list, not for long
      scan.addresses.push_back(it->first);
      scan.waiting.push_back(true);
      ++it;
    } else {
      it = away_since_.erase(it);
    }
  }
  scan.down.assign(scan.addresses.size(), false);
  return scan;
}

ReplicatorStats Replicator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool Replicator::Sleep(absl::Duration d, bool wake_for_rescan) {
  absl::MutexLock lock(&mu_);
  const absl::Time until = absl::Now() + d;
  while (!stopping_ && !(wake_for_rescan && rescan_) && absl::Now() < until) {
    cv_.WaitWithDeadline(&mu_, until);
  }
  if (wake_for_rescan) rescan_ = false;
  return !stopping_;
}

void Replicator::Loop() {
  while (Sleep(options_.interval, /*wake_for_rescan=*/true)) {
    if (absl::Status st = Scan(); !st.ok()) {
      log::Warning("replication scan failed", {{"error", st.ToString()}});
    }
  }
}

absl::Status Replicator::Scan() {
  std::vector<kvstate::Manifest> stored;
  RETURN_IF_ERROR(
      service_->ForEachManifest([&](kvstate::Manifest m) { stored.push_back(std::move(m)); }));
  const std::vector<std::string> live = client_->nodes();
  if (std::find(live.begin(), live.end(), options_.self) == live.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this node (", options_.self, ") is not among the ", live.size(), " live cache nodes yet"));
  }
  ScanPeers peers = PeersForScan();
  int64_t under = 0;
  for (const kvstate::Manifest& m : stored) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    Place(m, peers, under);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.scans;
  stats_.under_replicated = under;
  return absl::OkStatus();
}

void Replicator::Place(const kvstate::Manifest& m, ScanPeers& scan, int64_t& under) {
  const std::vector<std::string>& peers = scan.addresses;
  const size_t replicas = std::min<size_t>(options_.replicas, peers.size());
  const std::vector<size_t> order = cache_client::RendezvousOrder(m.state_key, peers);
  // Owners: the first R of the ranking that answer or are waited for; a peer found down makes
  // room for the next.
  size_t copies = 0, owners = 0;
  bool self_owns = false, all_owners_have = true;
  for (size_t i : order) {
    if (owners == replicas) break;
    if (scan.down[i]) continue;
    if (peers[i] == options_.self) {
      ++owners;
      ++copies;
      self_owns = true;
      continue;
    }
    if (scan.waiting[i]) {  // an owner away for less than repair_delay: no stand-in, no drop
      ++owners;
      all_owners_have = false;
      continue;
    }
    absl::StatusOr<kvstate::Held> held = client_->Holds(peers[i], m.namespace_key, m.state_key);
    if (!held.ok()) {
      const bool wait = Away(peers[i]) < options_.repair_delay;
      log::Warning(wait ? "replication: a peer is waited for"
                        : "replication: a peer is passed "
                          "over for this scan",
                   {{"peer", peers[i]}, {"error", held.status().ToString()}});
      (wait ? scan.waiting : scan.down)[i] = true;  // for the rest of this scan
      if (wait) {
        ++owners;
        all_owners_have = false;
      }
      continue;
    }
    Back(peers[i]);
    ++owners;
    if (held->stored) {
      ++copies;
      continue;
    }
    if (held->deleted_unix_micros > 0 && held->deleted_unix_micros >= m.created_unix_micros) {
      // Deleted on request (on that owner) after this copy was stored, while this node was away:
      // the deletion wins here too, tombstoned at the owner's time (a state stored again since is
      // newer, and kept), and only if this is still the copy scanned.
      if (service_
              ->FollowDelete(m.namespace_key, m.state_key, m.created_unix_micros,
                             absl::FromUnixMicros(held->deleted_unix_micros))
              .ok()) {
        absl::MutexLock lock(&mu_);
        ++stats_.deleted_states;
      }
      return;
    }
    absl::StatusOr<int64_t> sent = CopyTo(peers[i], m.state_key);
    if (!sent.ok()) {
      log::Warning("replication: a copy failed",
                   {{"peer", peers[i]}, {"error", sent.status().ToString()}});
      all_owners_have = false;
      continue;
    }
    ++copies;
    absl::MutexLock lock(&mu_);
    ++stats_.copied_states;
    stats_.copied_bytes += *sent;
  }
  if (!self_owns && all_owners_have && owners == replicas) {
    // Every owner has it: this copy is one too many (a pinned one stays).
    if (service_->DropCopy(m.namespace_key, m.state_key).ok()) {
      absl::MutexLock lock(&mu_);
      ++stats_.dropped_states;
      return;
    }
  }
  if (copies < replicas) ++under;
}

absl::StatusOr<int64_t> Replicator::CopyTo(const std::string& peer, const kvstate::StateKey& key) {
  ASSIGN_OR_RETURN(auto state, service_->ReadState(key));
  std::vector<std::span<const uint8_t>> pages;
  int64_t bytes = 0;
  for (const std::string& p : state.second) {
    pages.emplace_back(reinterpret_cast<const uint8_t*>(p.data()), p.size());
    bytes += static_cast<int64_t>(p.size());
  }
  RETURN_IF_ERROR(client_->PutCopy(peer, state.first, pages).status());
  // At most bytes_per_second: a repair must not starve the node's own traffic.
  Sleep(absl::Seconds(static_cast<double>(bytes) / options_.bytes_per_second));
  return bytes;
}

}  // namespace glimpse::cache_node
