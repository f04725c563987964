#include "core/transport/transport.h"

namespace glimpse::transport {

size_t ReceivedBatch::total_bytes() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b.size();
  return n;
}

}  // namespace glimpse::transport
