#include "core/cache_client/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

namespace glimpse::cache_client {

std::vector<size_t> RendezvousOrder(const kvstate::StateKey& key,
                                    const std::vector<std::string>& addresses) {
  std::vector<std::pair<uint64_t, size_t>> ranked;
  for (size_t i = 0; i < addresses.size(); ++i) {
    std::string seed(reinterpret_cast<const char*>(key.data()), key.size());
    seed += addresses[i];
    ranked.emplace_back(XXH64(seed.data(), seed.size(), 0), i);
  }
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<size_t> out;
  for (const auto& [score, i] : ranked) out.push_back(i);
  return out;
}

}  // namespace glimpse::cache_client
