// Our eviction pipeline against NVIDIA kvpress (tests/fixtures/kvpress/, made by
// tools/oracle/make_kvpress_fixtures.py from the same GGUF loaded by transformers in fp32): for
// each press, compression ratio and prompt, every (layer, kv-head) must keep the same positions as
// kvpress, except where the two sides disagree only at a near-tie of the cut.
//
// The settings that make our pipeline do what each press does are in tests/kvpress_fixtures.h.
// PyramidKV: the per-layer kept counts must equal the fixture's n_kept exactly.
//
// Tie tolerance: a mismatch is accepted when every entry kept by one side only has, on our scores,
// |s − s_cut| <= kRtol·|s_cut| + kAtol, where s_cut is our lowest kept score (forced entries
// excluded). Our prefill matches transformers to ~5e-5 in the logits; attention probabilities then
// differ by ~1e-4 relative, so kRtol = 5e-4 only forgives reorderings at an exact or near tie.
// (Fixtures of 2026-11-22: every position agreed exactly, although kvpress's own gap at the cut
// was as small as 1.3e-6 relative; see the "cut" pairs in the fixtures.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/eviction/pipeline.h"
#include "core/model/model_store.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/kvpress_fixtures.h"

namespace glimpse::eviction {
namespace {

constexpr double kRtol = 5e-4;
constexpr double kAtol = 1e-9;

using nlohmann::json;

// Forwards to a real scorer and keeps each layer's scores [Hkv, T]. The pipeline scores layers
// concurrently, so every layer's slot exists before the first call.
class RecordingScorer : public Scorer {
 public:
  RecordingScorer(std::unique_ptr<Scorer> inner, int32_t n_layers)
      : recorded(n_layers), inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  uint32_t needs() const override { return inner_->needs(); }
  int64_t window() const override { return inner_->window(); }
  absl::Status Score(const LayerView& view, float* scores) const override {
    absl::Status status = inner_->Score(view, scores);
    recorded[view.layer].assign(scores, scores + view.n_kv_heads * view.n_tokens);
    return status;
  }
  mutable std::vector<std::vector<float>> recorded;

 private:
  std::unique_ptr<Scorer> inner_;
};

struct Tally {
  int64_t kept = 0, agreeing = 0, tie_heads = 0, heads = 0;
  double worst_rel = 0.0;  // the largest |s − s_cut| / |s_cut| over mismatched entries
  void Add(const Tally& t) {
    kept += t.kept, agreeing += t.agreeing, tie_heads += t.tie_heads, heads += t.heads;
    worst_rel = std::max(worst_rel, t.worst_rel);
  }
};

// Compares one head's kept sets; `scores` [T] are ours, `forced` our always-kept entries.
Tally CompareHead(const std::vector<int32_t>& ours, const std::vector<int32_t>& theirs,
                  const float* scores, const std::vector<bool>& forced, std::string* error) {
  Tally t{.kept = static_cast<int64_t>(std::max(ours.size(), theirs.size())), .heads = 1};
  std::vector<int32_t> only;  // entries kept by exactly one side
  std::set_symmetric_difference(ours.begin(), ours.end(), theirs.begin(), theirs.end(),
                                std::back_inserter(only));
  std::vector<int32_t> both;
  std::set_intersection(ours.begin(), ours.end(), theirs.begin(), theirs.end(),
                        std::back_inserter(both));
  t.agreeing = static_cast<int64_t>(both.size());
  if (ours.size() != theirs.size()) *error = "different kept counts";
  if (only.empty()) return t;
  double cut = INFINITY;
  for (int32_t p : ours) {
    if (!forced[p]) cut = std::min(cut, double{scores[p]});
  }
  t.tie_heads = 1;
  for (int32_t p : only) {
    const double rel = std::fabs(scores[p] - cut) / std::max(std::fabs(cut), 1e-30);
    t.worst_rel = std::max(t.worst_rel, rel);
    if (std::fabs(scores[p] - cut) > kRtol * std::fabs(cut) + kAtol) {
      *error = "position " + std::to_string(p) + " score " + std::to_string(scores[p]) +
               " is not a near-tie of the cut " + std::to_string(cut);
    }
  }
  return t;
}

struct Case {
  std::string method;  // fixture name prefix
  double ratio;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.method << " cr " << c.ratio; }

class KvpressTest : public testing::KvpressSuite<Case> {
 protected:
  static std::vector<int32_t> Tokens(const std::string& name) {
    return testing::KvpressPromptTokens(*prompts_, name);
  }
};

std::vector<bool> Forced(const SelectionOptions& o, int64_t window, int64_t T) {
  std::vector<bool> forced(T, false);
  for (int64_t j = 0; j < T; ++j) forced[j] = j < o.sinks || j >= T - window;
  return forced;
}

// Compares one layer of every head.
void CompareLayer(const RecordingScorer& scorer, const EvictionResult& result, int32_t l,
                  const json& layer, const std::vector<bool>& forced, Tally& total) {
  const int64_t T = static_cast<int64_t>(forced.size());
  const std::vector<std::vector<int32_t>>& ours = result.kept_positions[l];
  ASSERT_EQ(static_cast<int64_t>(ours[0].size()), layer["n_kept"].get<int64_t>());
  for (size_t h = 0; h < ours.size(); ++h) {
    const std::vector<int32_t> theirs = testing::DecodeKeptMask(layer["heads"][h]["kept"]);
    const float* scores = scorer.recorded[l].data() + h * T;
    std::string error;
    total.Add(CompareHead(ours[h], theirs, scores, forced, &error));
    EXPECT_TRUE(error.empty()) << "head " << h << ": " << error;
  }
}

TEST_P(KvpressTest, KeepsTheSamePositionsAsKvpress) {
  const Case& c = GetParam();
  char name[64];
  std::snprintf(name, sizeof(name), "%s_cr%.1f.json", c.method.c_str(), c.ratio);
  const json fixture = testing::ReadKvpressFixture(name);
  ASSERT_FALSE(fixture.is_null());
  ASSERT_EQ(fixture["model"], std::filesystem::path(model::DefaultModelPath()).filename().string());
  Tally total;
  for (const json& fc : fixture["cases"]) {
    const std::vector<int32_t> tokens = Tokens(fc["prompt"]);
    const int64_t T = static_cast<int64_t>(tokens.size());
    ASSERT_EQ(T, fc["n_tokens"].get<int64_t>());
    const json& layers = fc["layers"];
    auto inner = CreateScorer(testing::KvpressScorer(c.method, fixture["settings"]));
    ASSERT_TRUE(inner.ok()) << inner.status();
    RecordingScorer scorer(std::move(*inner), model_->config().n_layers);
    const SelectionOptions options = testing::KvpressSelection(c.method, c.ratio, T);
    model::Sequence session(*model_, *pool_);
    auto result = PrefillAndEvict(session, tokens, scorer, options);
    ASSERT_TRUE(result.ok()) << result.status();
    const std::vector<bool> forced = Forced(options, scorer.window(), T);
    for (size_t l = 0; l < layers.size(); ++l) {
      SCOPED_TRACE(::testing::Message() << fc["prompt"] << " layer " << l);
      CompareLayer(scorer, *result, static_cast<int32_t>(l), layers[l], forced, total);
    }
  }
  std::printf(
      "[kvpress] %-18s cr %.1f: %.2f %% of kept positions agree (%lld / %lld), %lld of %lld "
      "heads differ at near-ties, worst |s - cut| / cut %.2e\n",
      c.method.c_str(), c.ratio, 100.0 * total.agreeing / std::max<int64_t>(total.kept, 1),
      static_cast<long long>(total.agreeing), static_cast<long long>(total.kept),
      static_cast<long long>(total.tie_heads), static_cast<long long>(total.heads),
      total.worst_rel);
}

INSTANTIATE_TEST_SUITE_P(Presses, KvpressTest,
                         ::testing::Values(Case{"snapkv", 0.5}, Case{"snapkv", 0.8},
                                           Case{"streamingllm", 0.5}, Case{"streamingllm", 0.8},
                                           Case{"pyramidkv", 0.5}, Case{"pyramidkv", 0.8},
                                           Case{"expected_attention", 0.5},
                                           Case{"expected_attention", 0.8}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.method + (info.param.ratio < 0.6 ? "_cr05" : "_cr08");
                         });

}  // namespace
}  // namespace glimpse::eviction
