// libFuzzer entry point for the GGUF parser (`make fuzz`). Any input must yield either a parsed
// file or an error status; AddressSanitizer turns an out-of-bounds read into a finding. On success
// every accessor and every tensor byte is touched, so a validation gap that lets a tensor extend
// past the image is caught here too.
#include <cstddef>
#include <cstdint>

#include "core/model/gguf.h"

// Receives a digest of the tensor bytes so that the reads cannot be optimised away.
volatile uint8_t g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = glimpse::model::GgufFile::Parse(data, size);
  if (!file.ok()) return 0;
  const glimpse::model::GgufFile& f = **file;
  (void)f.GetUint("general.alignment");
  (void)f.GetString("general.architecture");
  (void)f.GetStringArray("tokenizer.ggml.tokens");
  (void)f.GetFloatArray("tokenizer.ggml.scores");
  uint8_t sum = 0;
  for (const glimpse::model::GgufTensor& t : f.tensors()) {
    const auto* bytes = static_cast<const uint8_t*>(t.data);
    for (uint64_t i = 0; i < t.bytes; ++i) sum ^= bytes[i];
    if (f.FindTensor(t.name) != &t) __builtin_trap();
  }
  g_sink = sum;
  return 0;
}
