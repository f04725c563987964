#include "core/transport/transport.h"

#include "absl/synchronization/mutex.h"

namespace glimpse::transport {

size_t ReceivedBatch::total_bytes() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b.size();
  return n;
}

absl::StatusOr<PeerId> PeerMap::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(address);
  if (it != peers_.end()) return it->second;
  absl::StatusOr<PeerId> peer = transport_.Connect(address);
  if (peer.ok()) peers_.emplace(address, *peer);
  return peer;
}

void PeerMap::Forget(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(address);
  if (it == peers_.end()) return;
  (void)transport_.Disconnect(it->second);
  peers_.erase(it);
}

}  // namespace glimpse::transport
