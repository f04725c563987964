#include "core/kvstate/test_state.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace glimpse::kvstate::testing {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<std::span<const uint8_t>> TestState::spans() const {
  std::vector<std::span<const uint8_t>> out;
  for (const auto& p : pages) out.emplace_back(p.data(), p.size());
  return out;
}

Fingerprint TestModel(uint8_t tag) {
  Fingerprint f;
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(tag * 31 + i);
  return f;
}

NamespaceKey TestNamespace(uint8_t tag) {
  return MakeNamespaceKey(absl::StrCat("tenant-", tag), TestModel(tag), "snapkv");
}

absl::StatusOr<TestState> MakeTestState(const NamespaceKey& ns, const Fingerprint& model,
                                        const TestStateShape& shape, uint64_t seed) {
  std::vector<int32_t> tokens(shape.tokens_per_page * shape.pages_per_head);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(Mix(seed * 7919 + i) % 49152);
  return MakeTestStateForTokens(ns, model, shape, std::move(tokens), seed);
}

absl::StatusOr<TestState> MakeTestStateForTokens(const NamespaceKey& ns, const Fingerprint& model,
                                                 const TestStateShape& shape,
                                                 std::vector<int32_t> tokens, uint64_t seed) {
  const int64_t n = shape.tokens_per_page, hd = shape.head_dim;
  if (static_cast<int64_t>(tokens.size()) != n * shape.pages_per_head) {
    return absl::InvalidArgumentError("token count must be tokens_per_page × pages_per_head");
  }
  TestState s;
  s.tokens = std::move(tokens);
  Manifest& m = s.manifest;
  m.state_key = MakeStateKey(ns, s.tokens);
  m.namespace_key = ns;
  m.model = model;
  m.architecture = "llama";
  m.token_count = static_cast<uint32_t>(s.tokens.size());
  std::vector<float> keys(n * hd), values(n * hd);
  std::vector<int32_t> positions(n);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    for (uint32_t h = 0; h < shape.kv_heads; ++h) {
      for (uint32_t i = 0; i < shape.pages_per_head; ++i) {
        uint64_t r = Mix(seed ^ (uint64_t{l} << 40) ^ (uint64_t{h} << 20) ^ i);
        for (int64_t j = 0; j < n * hd; ++j) {
          r = Mix(r);
          keys[j] = static_cast<float>(static_cast<int64_t>(r % 2001) - 1000) / 250.0f;
          values[j] = static_cast<float>(static_cast<int64_t>((r >> 20) % 2001) - 1000) / 250.0f;
        }
        for (int64_t j = 0; j < n; ++j) positions[j] = static_cast<int32_t>(i * n + j);
        kvpage::PageView view{
            l, h, n, hd, keys.data(), values.data(), positions.data(), model, m.state_key};
        ASSIGN_OR_RETURN(size_t size, kvpage::EncodedSize(view, shape.codec));
        std::vector<uint8_t> bytes(size);
        RETURN_IF_ERROR(kvpage::EncodePage(view, shape.codec, bytes).status());
        ASSIGN_OR_RETURN(kvpage::PageHeader header, kvpage::ParsePageHeader(bytes));
        PageRef ref;
        ref.layer = l;
        ref.kv_head = h;
        ref.index = i;
        ref.first_position = positions.front();
        ref.last_position = positions.back();
        ref.n_tokens = static_cast<uint32_t>(n);
        ref.importance = static_cast<float>(Mix(r) % 1001) / 1000.0f;
        ref.tier = (i % 2 == 0) ? Tier::kRetained : Tier::kEvicted;
        ref.bytes = static_cast<uint32_t>(size);
        ref.crc32c = header.crc32c;
        m.pages.push_back(ref);
        s.pages.push_back(std::move(bytes));
      }
    }
  }
  return s;
}

}  // namespace glimpse::kvstate::testing
