// Streams generated tokens as text: each Push returns the text the tokens so far complete that was
// not returned before. A token that ends inside a UTF-8 sequence (byte-level BPE splits characters)
// waits until a later token completes it; Finish returns whatever is left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/tokenizer.h"

namespace glimpse::model {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  absl::StatusOr<std::string> Push(int32_t token);
  absl::StatusOr<std::string> Finish();

 private:
  const Tokenizer& tokenizer_;
  std::vector<int32_t> tokens_;
  size_t emitted_ = 0;  // bytes of the decoded text already returned
};

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t CompleteUtf8Prefix(const std::string& s);

}  // namespace glimpse::model
