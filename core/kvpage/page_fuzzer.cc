// libFuzzer entry point for the page decoder (`make fuzz`). Any input must yield a page or an
// error; AddressSanitizer turns an out-of-bounds read into a finding. Each input is decoded twice:
// as given, and with its CRC32C rewritten to match, so that mutations reach the checks and codec
// decoders behind the checksum (a random input almost never passes the CRC by itself). A decoded
// page must have the shape its header states, and every float is read.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/kvpage/crc32c.h"
#include "core/kvpage/page.h"

namespace {

volatile float g_sink;  // keeps the reads of decoded values

void DecodeAndTouch(std::span<const uint8_t> in) {
  auto page = glimpse::kvpage::DecodePage(in);
  if (!page.ok()) return;
  const glimpse::kvpage::PageHeader& h = page->header;
  const size_t cells = static_cast<size_t>(h.n_tokens * h.head_dim);
  if (page->keys.size() != cells || page->values.size() != cells ||
      page->positions.size() != static_cast<size_t>(h.n_tokens) ||
      page->key_min.size() != static_cast<size_t>(h.head_dim) || h.total_bytes() != in.size()) {
    __builtin_trap();
  }
  float sum = 0;
  for (size_t i = 0; i < cells; ++i) sum += page->keys[i] + page->values[i];
  g_sink = sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DecodeAndTouch({data, size});
  if (size >= glimpse::kvpage::kPageHeaderBytes) {
    std::vector<uint8_t> fixed(data, data + size);
    uint32_t crc = glimpse::kvpage::Crc32cExtend(0, fixed.data(), 60);
    crc = glimpse::kvpage::Crc32cExtend(crc, fixed.data() + 64, size - 64);
    std::memcpy(fixed.data() + 60, &crc, 4);
    DecodeAndTouch(fixed);
  }
  return 0;
}
