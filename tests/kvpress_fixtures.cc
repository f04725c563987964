#include "tests/kvpress_fixtures.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "gtest/gtest.h"

namespace glimpse::testing {

using nlohmann::json;

json ReadKvpressFixture(const std::string& name) {
  const std::string path = std::string(GLIMPSE_SOURCE_DIR) + "/tests/fixtures/kvpress/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (tools/oracle/make_kvpress_*fixtures.py)";
  return in.good() ? json::parse(in) : json();
}

std::vector<int32_t> DecodeKeptMask(const std::string& hex) {
  std::vector<int32_t> positions;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    const int byte = std::stoi(hex.substr(i, 2), nullptr, 16);
    for (int b = 0; b < 8; ++b) {
      if (byte & (1 << b)) positions.push_back(static_cast<int32_t>(i / 2 * 8 + b));
    }
  }
  return positions;
}

std::vector<int32_t> KvpressPromptTokens(const json& prompts, const std::string& name) {
  for (const json& p : prompts["prompts"]) {
    if (p["name"] == name) return p["tokens"].get<std::vector<int32_t>>();
  }
  ADD_FAILURE() << "prompt " << name << " not in prompts.json";
  return {};
}

eviction::ScorerConfig KvpressScorer(const std::string& method, const json& settings) {
  eviction::ScorerConfig config;
  config.method = method;
  if (method == "snapkv" || method == "pyramidkv" || method == "adakv_snapkv") {
    config.method = "snapkv";
    config.window = settings["window_size"].get<int64_t>();
    config.kernel = settings["kernel_size"].get<int64_t>();
    config.pooling = "avg";
  }
  return config;
}

eviction::SelectionOptions KvpressSelection(const std::string& method, double ratio, int64_t T) {
  const bool window = method == "snapkv" || method == "pyramidkv" || method == "adakv_snapkv";
  eviction::SelectionOptions o{
      .budget_tokens = static_cast<int64_t>(static_cast<double>(T) * (1.0 - ratio)),
      .sinks = window ? 0 : 4,
      .window = 0};
  if (method == "pyramidkv") {
    o.budget_tokens = 0;
    o.budget_ratio = 1.0 - ratio;
    o.schedule = eviction::Schedule::kPyramid;
  }
  if (method == "adakv_snapkv") o.granularity = eviction::Granularity::kPerLayer;
  return o;
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double LogitsError(const std::vector<float>& ours, const nlohmann::json& theirs) {
  const double m = ours[Argmax(ours)];
  double sum = 0.0;
  for (float v : ours) sum += std::exp(v - m);
  const auto ids = theirs["top_ids"].get<std::vector<int32_t>>();
  const auto values = theirs["top_logits"].get<std::vector<double>>();
  double worst = std::fabs(m + std::log(sum) - theirs["logsumexp"].get<double>());
  for (size_t i = 0; i < ids.size(); ++i) {
    worst = std::max(worst, std::fabs(ours[ids[i]] - values[i]));
  }
  return worst / theirs["range"].get<double>();
}

}  // namespace glimpse::testing
