// The prompt the model benchmarks share: a text file (bench/prompt.txt) repeated as one ChatML
// user message until the encoded prompt has at least `tokens` tokens. NotFound when the file
// cannot be read or is empty.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/model/model.h"

namespace glimpse::bench {

// The message is the text repeated, then `question` (may be empty).
inline absl::StatusOr<std::vector<int32_t>> RepeatedChatPrompt(const model::Model& m,
                                                               const std::string& path, int tokens,
                                                               const std::string& question) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::NotFoundError(absl::StrCat("prompt text ", path, " cannot be read or is empty"));
  }
  const model::Tokenizer& tok = m.tokenizer();
  std::string body;
  std::vector<int32_t> ids;
  while (static_cast<int>(ids.size()) < tokens) {
    body += text.str();
    ids = tok.Encode(tok.ApplyChatTemplate({{"user", body + question}}, true));
  }
  return ids;
}

}  // namespace glimpse::bench
