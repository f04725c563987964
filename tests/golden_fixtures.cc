#include "tests/golden_fixtures.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace glimpse::testing {
namespace {

// The checkout the fixtures are read from: $GLIMPSE_SOURCE_DIR (ctest sets it; a copy of the tree
// on another machine, such as a GPU host running prebuilt tests, points it at itself), else the
// one this binary was built from.
std::string SourceDir() {
  const char* dir = std::getenv("GLIMPSE_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : GLIMPSE_SOURCE_DIR;
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open fixture ", path));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::DataLossError(absl::StrCat(path, " is not valid JSON"));
  return doc;
}

absl::StatusOr<nlohmann::json> ReadFixture(const std::string& name) {
  return ReadJsonFile(absl::StrCat(SourceDir(), "/tests/fixtures/golden/", name));
}

absl::StatusOr<std::vector<float>> DecodeFloats(const std::string& b64) {
  std::string bytes;
  if (!absl::Base64Unescape(b64, &bytes) || bytes.size() % sizeof(float) != 0) {
    return absl::DataLossError("logits_f32_b64 is not base64 of float32s");
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace

std::string TinyModelDir(const std::string& name) {
  return absl::StrCat(SourceDir(), "/tests/fixtures/tiny/", name);
}

absl::StatusOr<TinyModelGolden> LoadTinyModelGolden(const std::string& name) {
  const std::string path = TinyModelDir(name) + "/golden.json";
  auto doc = ReadJsonFile(path);
  if (!doc.ok()) return doc.status();
  TinyModelGolden g;
  try {
    g.token_ids = (*doc)["token_ids"].get<std::vector<int32_t>>();
    g.vocab_size = (*doc)["vocab_size"].get<int64_t>();
    g.greedy = (*doc)["greedy"].get<std::vector<int32_t>>();
    g.greedy_min_margin = (*doc)["greedy_min_margin"].get<float>();
    for (const auto& c : (*doc)["tokenizer_cases"]) {
      g.tokenizer_cases.push_back(
          {c["text"].get<std::string>(), c["ids"].get<std::vector<int32_t>>()});
    }
    auto logits = DecodeFloats((*doc)["logits_f32_b64"].get<std::string>());
    if (!logits.ok()) return logits.status();
    g.logits = *std::move(logits);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
  if (g.vocab_size <= 0 ||
      g.logits.size() != g.token_ids.size() * static_cast<size_t>(g.vocab_size)) {
    return absl::DataLossError(absl::StrCat(path, ": ", g.logits.size(), " logits for ",
                                            g.token_ids.size(), " tokens × vocab ", g.vocab_size));
  }
  return g;
}

absl::StatusOr<std::vector<TokenizerCase>> LoadTokenizerCases() {
  auto doc = ReadFixture("tokenizer.json");
  if (!doc.ok()) return doc.status();
  std::vector<TokenizerCase> cases;
  for (const auto& c : (*doc)["cases"]) {
    cases.push_back({c["text"].get<std::string>(), c["ids"].get<std::vector<int32_t>>()});
  }
  return cases;
}

absl::StatusOr<std::vector<LogitsCase>> LoadLogitsCases() {
  auto doc = ReadFixture("logits.json");
  if (!doc.ok()) return doc.status();
  std::vector<LogitsCase> cases;
  for (const auto& p : (*doc)["prompts"]) {
    LogitsCase c{p["name"].get<std::string>(), p["prompt_tokens"].get<std::vector<int32_t>>(), {}};
    for (const auto& r : p["results"]) {
      auto logits = DecodeFloats(r["logits_f32_b64"].get<std::string>());
      if (!logits.ok()) return logits.status();
      c.results.push_back({r["engine"].get<std::string>(), *std::move(logits)});
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

absl::StatusOr<std::vector<GreedyCase>> LoadGreedyCases() {
  auto doc = ReadFixture("greedy.json");
  if (!doc.ok()) return doc.status();
  std::vector<GreedyCase> cases;
  for (const auto& c : (*doc)["cases"]) {
    cases.push_back({c["message"].get<std::string>(),
                     c["prompt_tokens"].get<std::vector<int32_t>>(),
                     c["llama_cpp"].get<std::vector<int32_t>>(),
                     c["transformers"].get<std::vector<int32_t>>()});
  }
  return cases;
}

LogitsDiff CompareLogits(const std::vector<float>& ours, const std::vector<float>& golden,
                         size_t offset) {
  LogitsDiff d;
  const auto [lo, hi] = std::minmax_element(golden.begin(), golden.end());
  d.range = *hi - *lo;
  for (size_t i = 0; i < ours.size(); ++i) {
    const float diff = std::abs(ours[i] - golden[offset + i]);
    if (!(diff <= d.max_abs)) {  // NaN counts as the worst
      d.max_abs = std::isnan(diff) ? INFINITY : diff;
      d.worst = i;
    }
  }
  return d;
}

}  // namespace glimpse::testing
