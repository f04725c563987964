// Byte-level BPE tokenizer (GPT-2 family) built from GGUF metadata: tokenizer.ggml.{model="gpt2",
// pre, tokens, token_type, merges, bos/eos/padding ids} and tokenizer.chat_template.
//
// Encoding: special/control tokens (token_type 3 or 4, e.g. "<|im_start|>") are matched literally
// first; the text between them is pre-tokenized with the regex of `pre` (SmolLM2's "smollm": each
// digit alone, then GPT-2's  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ ), each piece mapped bytes→unicode (GPT-2 byte encoder) and
// merged by BPE rank. Decoding reverses the byte mapping; special tokens decode to their text.
// Encode∘Decode round-trips any UTF-8 text. Thread-safe after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/gguf.h"

namespace glimpse::model {

struct ChatTurn {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  // Fails with a message naming the key when metadata is missing or inconsistent, or when the
  // tokenizer model / pre-tokenizer is not supported.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // InvalidArgument naming the id when a token id is out of range.
  virtual absl::StatusOr<std::string> Decode(const std::vector<int32_t>& tokens) const = 0;
  // The text of one token (bytes may be an incomplete UTF-8 sequence).
  virtual absl::StatusOr<std::string> TokenText(int32_t token) const = 0;

  // Renders the model's ChatML template: for SmolLM2, a default system turn is prepended when the
  // first turn is not "system"; each turn is "<|im_start|>{role}\n{content}<|im_end|>\n"; with
  // `add_generation_prompt`, "<|im_start|>assistant\n" follows. There is no Jinja engine: the
  // default system text is copied from a ChatML template that adds one when messages[0] is not
  // "system"; any other template (or none) renders plain ChatML with no default system turn.
  virtual std::string ApplyChatTemplate(const std::vector<ChatTurn>& turns,
                                        bool add_generation_prompt) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // True for tokens that end generation: eos and the control tokens "<|im_end|>",
  // "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>" when the vocabulary has them.
  virtual bool IsEndOfGeneration(int32_t token) const = 0;
};

}  // namespace glimpse::model
