// Reads the golden fixtures of tests/fixtures/golden/ (written by tools/oracle/make_golden.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace glimpse::testing {

struct TokenizerCase {
  std::string text;
  std::vector<int32_t> ids;
};

// One engine's last-position logits for one prompt.
struct EngineLogits {
  std::string engine;  // "llama.cpp" or "transformers"
  std::vector<float> logits;
};

struct LogitsCase {
  std::string name;
  std::vector<int32_t> prompt_tokens;
  std::vector<EngineLogits> results;
};

struct GreedyCase {
  std::string message;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> llama_cpp;
  std::vector<int32_t> transformers;
};

absl::StatusOr<std::vector<TokenizerCase>> LoadTokenizerCases();
absl::StatusOr<std::vector<LogitsCase>> LoadLogitsCases();
absl::StatusOr<std::vector<GreedyCase>> LoadGreedyCases();

}  // namespace glimpse::testing
