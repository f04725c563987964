// The vocabulary spec both tokenizer front-ends fill (FromGguf from GGUF metadata, FromHfDirectory
// from tokenizer.json), and the one constructor that builds a byte-level BPE tokenizer from it.
// The spec uses GGUF's conventions, so a Hugging Face vocabulary is first translated the way
// llama.cpp's convert_hf_to_gguf.py does (added tokens become control or user-defined tokens
// holding their raw text). Internal to core/model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/tokenizer.h"
#include "core/model/unicode.h"

namespace glimpse::model::tokenizer_internal {

// tokenizer.ggml.token_type values (llama_token_type).
constexpr int64_t kTypeNormal = 1;
constexpr int64_t kTypeUnknown = 2;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;
constexpr int64_t kTypeUnused = 5;

struct VocabSpec {
  // [vocab] Normal tokens hold their GPT-2 byte-encoded text ("Ġthe"); control, user-defined and
  // unknown tokens hold raw text and are matched literally in the input. Empty text (with any
  // type) is a hole: the id exists but is never produced and decodes to "".
  std::vector<std::string> tokens;
  std::vector<int64_t> token_types;  // [vocab] kType*
  // (left, right) byte-encoded operands, in rank order. Operands and results need not be tokens.
  std::vector<std::pair<std::string, std::string>> merges;
  PreTokenizer pre = PreTokenizer::kDefault;
  bool ignore_merges = false;  // a word that is a whole token is emitted without merging
  int32_t bos_id = -1;         // -1 when absent; otherwise < tokens.size()
  int32_t eos_id = -1;
  std::string chat_template;  // "" when absent
  // Names where `tokens` came from, for error messages ("tokenizer.ggml.tokens").
  std::string tokens_field;
};

// Fails (InvalidArgument naming spec.tokens_field) when the vocabulary is empty, token_types has
// another size, a non-empty token text repeats, or bos/eos is outside the vocabulary.
absl::StatusOr<std::unique_ptr<Tokenizer>> BuildBpeTokenizer(VocabSpec spec);

// GPT-2 byte encoding of raw bytes (the form normal tokens and merges are stored in).
std::string ByteEncode(std::string_view raw);

}  // namespace glimpse::model::tokenizer_internal
