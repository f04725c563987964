#include "core/eviction/profile.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace glimpse::eviction {
namespace {

using nlohmann::json;

constexpr char kFingerprint[] = "17f1ae519c28bd6a26fafb69beb2478e";

json Doc(json methods) {
  return {{"format", "glimpse-eviction-profile/1"},
          {"model_fingerprint", kFingerprint},
          {"methods", std::move(methods)}};
}

TEST(BuiltInSettingsTest, AreTheRegistryDefaultsWithFourSinksAndAUniformSchedule) {
  auto snap = BuiltInSettings("snapkv");
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->scorer.method, "snapkv");
  EXPECT_EQ(snap->scorer.window, 64);
  EXPECT_EQ(snap->scorer.kernel, 5);
  EXPECT_EQ(snap->scorer.pooling, "avg");
  EXPECT_EQ(snap->sinks, 4);
  EXPECT_EQ(snap->schedule, Schedule::kUniform);
  auto pyramid = BuiltInSettings("pyramidkv");
  ASSERT_TRUE(pyramid.ok());
  EXPECT_EQ(pyramid->scorer.method, "snapkv");
  EXPECT_EQ(pyramid->schedule, Schedule::kPyramid);
  auto h2o = BuiltInSettings("h2o");
  ASSERT_TRUE(h2o.ok());
  EXPECT_EQ(h2o->scorer.window, 0);
  EXPECT_EQ(h2o->recent_window, 32);
  EXPECT_EQ(BuiltInSettings("cake")->schedule, Schedule::kCake);
  EXPECT_EQ(BuiltInSettings("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(SelectionForTest, BudgetIsTheCeilingOfTheRatioButNeverBelowSinksAndWindow) {
  MethodSettings s = *BuiltInSettings("h2o");
  SelectionOptions o = SelectionFor(s, 0, 0.2, 1001);
  EXPECT_EQ(o.budget_tokens, 201);  // ceil(200.2)
  EXPECT_EQ(o.window, 32);
  EXPECT_EQ(o.sinks, 4);
  o = SelectionFor(s, 0, 0.01, 1000);
  EXPECT_EQ(o.budget_tokens, 36);
  o = SelectionFor(s, 16, 0.01, 1000);  // a window scorer's own W replaces the recent window
  EXPECT_EQ(o.window, 16);
  EXPECT_EQ(o.budget_tokens, 20);
}

TEST(EvictionProfileTest, RoundTripsThroughJsonAndFallsBackToBuiltIns) {
  EvictionProfile profile;
  profile.set_model_fingerprint(kFingerprint);
  MethodSettings s = *BuiltInSettings("snapkv");
  s.scorer.window = 16;
  s.scorer.kernel = 7;
  s.scorer.pooling = "max";
  s.sinks = 0;
  s.granularity = Granularity::kPerLayer;
  profile.Set("snapkv", s);
  auto back = EvictionProfile::FromJson(profile.ToJson(), kFingerprint, "test");
  ASSERT_TRUE(back.ok()) << back.status();
  auto got = back->For("snapkv");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Describe(*got), "snapkv W=16 k=7 max, sinks 0, uniform per_layer");
  EXPECT_EQ(Describe(*back->For("streamingllm")),
            "streamingllm, sinks 4, recent 32, uniform per_head");
}

// Scorers without a window take a kernel and pooling (pooled_scorer.cc), StreamingLLM neither;
// kernel 1 pools nothing and is the built-in setting, under its name.
TEST(EvictionProfileTest, WindowlessScorersTakeAKernelAndKernelOneIsTheBuiltIn) {
  auto p = EvictionProfile::FromJson(
      Doc({{"h2o", {{"scorer", "h2o"}, {"kernel", 5}, {"pooling", "max"}}},
           {"lookahead", {{"scorer", "lookahead"}, {"kernel", 9}}},
           {"kvzip_gate", {{"scorer", "kvzip_gate"}, {"kernel", 1}, {"pooling", "avg"}}}}),
      kFingerprint, "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Describe(*p->For("h2o")), "h2o k=5 max, sinks 4, recent 32, uniform per_head");
  EXPECT_EQ(Describe(*p->For("lookahead")),
            "lookahead k=9 avg, sinks 4, recent 32, uniform per_head");
  // LookaheadKV alone may be given a window, read beside its rows; it replaces the recent window.
  auto windowed = EvictionProfile::FromJson(
      Doc({{"lookahead", {{"scorer", "lookahead"}, {"window", 16}, {"kernel", 1}}}}), kFingerprint,
      "f");
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(Describe(*windowed->For("lookahead")),
            "lookahead W=16 k=1 avg, sinks 4, uniform per_head");
  // Unstated, the window and kernel are described as the scorer runs them: its defaults.
  auto unstated =
      EvictionProfile::FromJson(Doc({{"lookahead", {{"scorer", "lookahead"}, {"window", 16}}},
                                     {"snapkv", {{"scorer", "snapkv"}}}}),
                                kFingerprint, "f");
  ASSERT_TRUE(unstated.ok()) << unstated.status();
  EXPECT_EQ(Describe(*unstated->For("lookahead")), Describe(*windowed->For("lookahead")));
  EXPECT_EQ(Describe(*unstated->For("snapkv")), "snapkv W=64 k=5 avg, sinks 4, uniform per_head");
  EXPECT_EQ(Describe(*p->For("kvzip_gate")), Describe(*BuiltInSettings("kvzip_gate")));
  EXPECT_EQ(Describe(*BuiltInSettings("h2o")), "h2o, sinks 4, recent 32, uniform per_head");
  for (const json& bad :
       {json{{"scorer", "streamingllm"}, {"kernel", 5}},
        json{{"scorer", "streamingllm"}, {"pooling", "avg"}},
        json{{"scorer", "h2o"}, {"kernel", 301}}, json{{"scorer", "kvzip_gate"}, {"window", 16}},
        json{{"scorer", "lookahead"}, {"window", -1}}}) {
    const std::string method = bad["scorer"];
    auto refused = EvictionProfile::FromJson(Doc({{method, bad}}), kFingerprint, "f");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad.dump();
  }
}

TEST(EvictionProfileTest, RefusesAnotherModelsProfileNamingBoth) {
  auto p = EvictionProfile::FromJson(Doc(json::object()), "00000000000000000000000000000000", "f");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find(kFingerprint), std::string::npos);
  EXPECT_TRUE(EvictionProfile::FromJson(Doc(json::object()), "", "f").ok());  // any model
}

TEST(EvictionProfileTest, RejectsMalformedEntriesNamingTheMethod) {
  const json bad[] = {
      Doc({{"nope", {{"scorer", "snapkv"}}}}),
      Doc({{"snapkv", {{"scorer", "nope"}}}}),
      Doc({{"h2o", {{"scorer", "h2o"}, {"window", 8}}}}),
      Doc({{"snapkv", {{"scorer", "snapkv"}, {"kernel", 4}}}}),
      Doc({{"snapkv", {{"scorer", "snapkv"}, {"pooling", "min"}}}}),
      Doc({{"snapkv", {{"scorer", "snapkv"}, {"sinks", -1}}}}),
      Doc({{"snapkv", {{"scorer", "snapkv"}, {"schedule", "cake"}}}}),
      Doc({{"snapkv", {{"scorer", "snapkv"}, {"granularity", "per_row"}}}}),
      Doc({{"snapkv", {{"scorer", "snapkv"}, {"sinks", "four"}}}}),
      Doc({{"snapkv", "snapkv"}}),
      json{{"format", "other"}, {"model_fingerprint", kFingerprint}},
      json{{"format", "glimpse-eviction-profile/1"}},
  };
  for (const json& doc : bad) {
    auto p = EvictionProfile::FromJson(doc, kFingerprint, "f");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << doc.dump();
  }
}

TEST(EvictionProfileTest, LoadReadsAFileAndReportsAMissingOne) {
  const std::string path = ::testing::TempDir() + "/profile_test.eviction.json";
  {
    std::ofstream out(path);
    out << Doc({{"lookahead", {{"scorer", "lookahead"}, {"sinks", 0}, {"recent_window", 8}}}});
  }
  auto p = EvictionProfile::Load(path, kFingerprint);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->source(), path);
  EXPECT_EQ(p->For("lookahead")->recent_window, 8);
  EXPECT_EQ(EvictionProfile::Load(path + ".missing", kFingerprint).status().code(),
            absl::StatusCode::kNotFound);
  {
    std::ofstream out(path);
    out << "{not json";
  }
  EXPECT_EQ(EvictionProfile::Load(path, kFingerprint).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove(path);
}

TEST(ResolveProfileTest, FindsTheProfileBesideTheModuleOrFallsBackToBuiltIns) {
  const std::string dir = ::testing::TempDir() + "/resolve_profile_test";
  std::filesystem::create_directories(dir);
  const std::string module = dir + "/m.safetensors";
  EXPECT_EQ(ProfilePathFor(module), dir + "/m.eviction.json");
  EXPECT_EQ(ProfilePathFor("x.bin"), "x.bin.eviction.json");
  auto none = ResolveProfile("", module, kFingerprint);  // no file beside the module yet
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->source(), "built-in");
  {
    std::ofstream out(dir + "/m.eviction.json");
    out << Doc({{"h2o", {{"scorer", "h2o"}, {"sinks", 8}}}});
  }
  auto beside = ResolveProfile("", module, kFingerprint);
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_EQ(beside->For("h2o")->sinks, 8);
  EXPECT_EQ(ResolveProfile("none", module, kFingerprint)->source(), "built-in");
  EXPECT_EQ(ResolveProfile("", module, "00000000000000000000000000000000").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveProfile(dir + "/missing.json", module, kFingerprint).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(AttachLearnedFilesTest, FindsTheGatesWeightsBesideTheModule) {
  const std::string dir = ::testing::TempDir() + "/attach_learned_files_test";
  std::filesystem::create_directories(dir);
  const std::string module = dir + "/m.safetensors";
  EXPECT_EQ(GateWeightsPathFor(module, "kvzip_gate"), dir + "/m.kvzip_gate.safetensors");

  ScorerConfig gate;
  gate.method = "trimkv_gate";
  const absl::Status missing = AttachLearnedFiles(gate, module);
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find(dir + "/m.trimkv_gate.safetensors"), std::string::npos)
      << missing;
  EXPECT_EQ(AttachLearnedFiles(gate, "").code(), absl::StatusCode::kFailedPrecondition);
  std::ofstream(dir + "/m.trimkv_gate.safetensors") << "x";
  ASSERT_TRUE(AttachLearnedFiles(gate, module).ok());
  EXPECT_EQ(gate.weights_path, dir + "/m.trimkv_gate.safetensors");

  ScorerConfig named;
  named.method = "kvzip_gate";
  named.weights_path = "/elsewhere.safetensors";
  ASSERT_TRUE(AttachLearnedFiles(named, module).ok());  // a named file is kept
  EXPECT_EQ(named.weights_path, "/elsewhere.safetensors");

  ScorerConfig lookahead;
  lookahead.method = "lookahead";
  ASSERT_TRUE(AttachLearnedFiles(lookahead, module).ok());
  EXPECT_EQ(lookahead.module_path, module);
  ScorerConfig snapkv;
  snapkv.method = "snapkv";
  ASSERT_TRUE(AttachLearnedFiles(snapkv, "").ok());  // heuristics need no file
  EXPECT_TRUE(snapkv.module_path.empty() && snapkv.weights_path.empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace glimpse::eviction
