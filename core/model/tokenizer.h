// Byte-level BPE tokenizer (GPT-2 family) built from GGUF metadata: tokenizer.ggml.{model="gpt2",
// pre, tokens, token_type, merges, bos/eos/padding ids} and tokenizer.chat_template; or from a
// Hugging Face tokenizer.json, translated to the same vocabulary and pre-tokenizer modes.
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
  // Builds the same tokenizer from a Hugging Face checkpoint directory: tokenizer.json (BPE model
  // vocab and merges, added_tokens, pre_tokenizer) and, when present, tokenizer_config.json
  // (chat_template, bos_token, eos_token) and chat_template.jinja (used when tokenizer_config.json
  // has no chat_template). Supported pre_tokenizers: ByteLevel (gpt2),
  // Sequence[Digits(individual_digits), ByteLevel] (smollm), Sequence[Split(regex),
  // ByteLevel(use_regex=false)] with Llama 3's or Qwen2's exact regex. A Qwen2 NFC normalizer is
  // accepted but not applied (as llama.cpp does). Errors name the file and the field: NotFound
  // for a missing tokenizer.json, Unimplemented for model.byte_fallback and other BPE options we
  // do not implement, InvalidArgument for anything malformed or unrecognised.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfDirectory(const std::string& dir);
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
