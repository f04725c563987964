// Where a state lives among several cache nodes: rendezvous (highest-random-weight) hashing, the
// nodes ranked by XXH64 of the state key followed by the node's address, highest first. Every
// worker and every node computes the same ranking from the same address list; removing a node
// moves only the states it ranked first or second for, and adding one moves only those it now
// ranks high for. The R highest-ranked nodes are a state's owners.
#pragma once

#include <string>
#include <vector>

#include "core/kvstate/state_key.h"

namespace glimpse::cache_client {

// Indices into `addresses`, highest-ranked first.
std::vector<size_t> RendezvousOrder(const kvstate::StateKey& key,
                                    const std::vector<std::string>& addresses);

}  // namespace glimpse::cache_client
