// Streams generated tokens as text: each Push returns the text the tokens so far complete that was
// not returned before. A token that ends inside a UTF-8 sequence (byte-level BPE splits characters)
// waits until a later token completes it; Finish returns whatever is left. What it returns is
// always valid UTF-8: a model may generate bytes that form no character (a stray continuation
// byte, a sequence cut short), and each such byte becomes U+FFFD, as Hugging Face's
// decode(errors="replace") does and as protobuf string fields and JSON require. A token the
// tokenizer has no text for (an id of an embedding row past its vocabulary, as Qwen2's padded
// rows) also reads as U+FFFD, so a turn's text never fails where its tokens did not.
//
// Byte-level BPE decodes a token sequence as the concatenation of its tokens' bytes
// (Tokenizer::TokenText), so each Push costs one token, not a decode of everything so far.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/model/tokenizer.h"

namespace glimpse::model {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Both always OK; StatusOr kept so that callers need not change if a failure mode appears.
  absl::StatusOr<std::string> Push(int32_t token);
  absl::StatusOr<std::string> Finish();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;  // bytes not returned yet: the start of an unfinished UTF-8 sequence
};

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t CompleteUtf8Prefix(const std::string& s);

// `bytes` with every byte that starts no well-formed UTF-8 character (and every encoded surrogate)
// replaced by U+FFFD.
std::string ValidUtf8(std::string_view bytes);

}  // namespace glimpse::model
