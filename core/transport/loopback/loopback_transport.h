// LoopbackTransport: an in-process Transport for unit tests of callers (no UCX, no threads).
//
// Engines created with the same LoopbackFabric reach each other by LocalAddress(); Submit copies
// the batch into the receiver's queue at once, so every transfer is done when Submit returns
// (its status: OK, or Unavailable when the receiver is gone). The checksum travels and is
// verified by Receive exactly as on the wire, so TEST_CorruptLoopbackChecksums yields DataLoss.
#pragma once

#include <memory>

#include "core/transport/transport.h"

namespace glimpse::transport {

class LoopbackFabric;  // shared registry of engines; keep it alive while engines exist

std::shared_ptr<LoopbackFabric> NewLoopbackFabric();

absl::StatusOr<std::unique_ptr<Transport>> CreateLoopbackTransport(
    std::shared_ptr<LoopbackFabric> fabric, const Options& options = {});

// Test hook of a transport CreateLoopbackTransport made: while on, batches it submits with a
// checksum carry a wrong one, so that their receiver reports DataLoss.
void TEST_CorruptLoopbackChecksums(Transport& loopback, bool on);

}  // namespace glimpse::transport
