// Which peers an engine exchanges batches with. In a cluster the coordinator's membership is the
// list (core/cluster/coordinator_peers.h): an engine connects only to addresses a registered node
// stated, and accepts batches only from them.
//
// A batch names its sender by the address the sender states (ReceivedBatch::sender_address);
// UCX does not authenticate it. The allowlist therefore keeps out engines nobody registered (a
// stray or misconfigured process, a caller naming an arbitrary reply address, an engine of
// another cluster), not a peer that copies a registered address: that takes the network's own
// isolation (RDMA partition keys, a private network), as in Mooncake and NIXL.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/transport/transport.h"

namespace glimpse::transport {

enum class PeerVerdict { kAllowed, kRefused, kUnknown };

class PeerAllowlist {
 public:
  virtual ~PeerAllowlist() = default;
  // Whether `address` (an engine's LocalAddress()) belongs to an allowed peer. May block for a
  // bounded time to refresh the list. Thread-safe.
  virtual bool Allows(std::string_view address) = 0;
  // What the list says of `address` now, at once, without refreshing it: kUnknown when only a
  // refresh could tell (Allows decides). Thread-safe.
  virtual PeerVerdict Peek(std::string_view address) const = 0;
  // Whether `address` is an engine of the node with `role` and `id` (core/common/grpc/identity.h;
  // id `*`: any node of the role): a service replies only to its caller's own engines. A list
  // that knows no owners answers Allows. May block as Allows does. Thread-safe.
  virtual bool Belongs(std::string_view address, std::string_view role, std::string_view id) = 0;
};

// `inner`, restricted to the peers `allowlist` allows: Connect to any other address is
// PermissionDenied. A batch's sender is screened twice: when its header arrives
// (Transport::ScreenSenders: a sender Peek refuses gets nothing allocated), and, for one Peek
// does not know, by Allows when Receive takes the batch (dropped, its buffers released). Either
// way Receive reports PermissionDenied naming the sender, counted in Metrics::peers_refused. A
// null `allowlist` returns `inner` as it is (accepts any peer).
std::unique_ptr<Transport> RestrictToPeers(std::unique_ptr<Transport> inner,
                                           std::shared_ptr<PeerAllowlist> allowlist);

// A short printable name of a transport address for messages and logs ("UCX engine 01a2b3c",
// "loopback:3", "a 412-byte address", "no address").
std::string DescribeAddress(std::string_view address);

}  // namespace glimpse::transport
