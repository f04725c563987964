// Reads the golden fixtures of tests/fixtures/golden/ (written by tools/oracle/make_golden.py) and
// of the tiny checkpoints in tests/fixtures/tiny/<name>/ (tools/oracle/make_tiny_models.py).
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

// A tiny randomly-initialised Hugging Face checkpoint's golden.json: transformers' outputs in fp32.
struct TinyModelGolden {
  std::vector<int32_t> token_ids;  // [T]
  int64_t vocab_size = 0;          // rows of the embedding table (may exceed the tokenizer's)
  std::vector<float> logits;       // [T, vocab_size], every position
  std::vector<int32_t> greedy;     // argmax continuation of token_ids, eos ignored
  float greedy_min_margin = 0;     // smallest top-1 minus top-2 logit along that continuation
  std::vector<TokenizerCase> tokenizer_cases;  // encoded without special-token insertion
};

// The checkpoint directory tests/fixtures/tiny/<name>.
std::string TinyModelDir(const std::string& name);
// Reads TinyModelDir(name)/golden.json; DataLoss when logits are not [T, vocab_size].
absl::StatusOr<TinyModelGolden> LoadTinyModelGolden(const std::string& name);

// How far logits are from golden ones: max |ours − golden| over golden[offset, offset +
// ours.size()) (NaN counts as the worst), where, and the whole golden's range.
struct LogitsDiff {
  float max_abs = 0.0f;
  float range = 0.0f;
  size_t worst = 0;  // index into ours of max_abs
};
LogitsDiff CompareLogits(const std::vector<float>& ours, const std::vector<float>& golden,
                         size_t offset = 0);

absl::StatusOr<std::vector<TokenizerCase>> LoadTokenizerCases();
absl::StatusOr<std::vector<LogitsCase>> LoadLogitsCases();
absl::StatusOr<std::vector<GreedyCase>> LoadGreedyCases();

}  // namespace glimpse::testing
