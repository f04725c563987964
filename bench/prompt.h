// The prompt the model benchmarks share: a text file (bench/prompt.txt) repeated as one ChatML
// user message until the encoded prompt has at least `tokens` tokens.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace glimpse::bench {

// The message is the text repeated, then `question` (may be empty).
inline std::vector<int32_t> RepeatedChatPrompt(const model::Model& m, const std::string& path,
                                               int tokens, const std::string& question) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
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
