// Synthetic states for tests and benchmarks: a manifest and its encoded pages, made
// deterministically from a seed (keys and values pseudo-random, positions contiguous).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kvpage/codec.h"
#include "core/kvstate/manifest.h"

namespace glimpse::kvstate::testing {

struct TestStateShape {
  uint32_t layers = 2;
  uint32_t kv_heads = 2;
  uint32_t pages_per_head = 2;
  int64_t tokens_per_page = 16;
  int64_t head_dim = 32;
  kvpage::Codec codec = kvpage::Codec::kFp16;
};

struct TestState {
  Manifest manifest;
  std::vector<int32_t> tokens;              // [token_count]
  std::vector<std::vector<uint8_t>> pages;  // in manifest order
  std::vector<std::span<const uint8_t>> spans() const;
};

Fingerprint TestModel(uint8_t tag = 1);
NamespaceKey TestNamespace(uint8_t tag = 1);
// tokens_per_page × pages_per_head tokens, ids from the seed.
absl::StatusOr<TestState> MakeTestState(const NamespaceKey& ns, const Fingerprint& model,
                                        const TestStateShape& shape, uint64_t seed);
// The same, for a given token sequence (its length must be tokens_per_page × pages_per_head).
absl::StatusOr<TestState> MakeTestStateForTokens(const NamespaceKey& ns, const Fingerprint& model,
                                                 const TestStateShape& shape,
                                                 std::vector<int32_t> tokens, uint64_t seed);

}  // namespace glimpse::kvstate::testing
