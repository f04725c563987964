#include "core/kvstate/manifest.h"

#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"

namespace glimpse::kvstate {
namespace {

using testing::MakeTestState;
using testing::TestModel;
using testing::TestNamespace;
using testing::TestState;

TestState MakeState(uint64_t seed = 1) {
  auto s = MakeTestState(TestNamespace(), TestModel(), {}, seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(ManifestTest, EncodeDecodeRoundTrip) {
  TestState s = MakeState();
  s.manifest.created_unix_micros = 123456789;
  ASSERT_TRUE(ValidateManifest(s.manifest).ok());
  auto back = DecodeManifest(EncodeManifest(s.manifest));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->SameContent(s.manifest));
  EXPECT_EQ(back->created_unix_micros, 123456789);
  EXPECT_EQ(back->total_page_bytes(), s.manifest.total_page_bytes());
}

TEST(ManifestTest, DecodeRejectsEveryTruncationAndBitFlip) {
  const std::string rec = EncodeManifest(MakeState().manifest);
  for (size_t n = 0; n < rec.size(); ++n) {
    EXPECT_FALSE(DecodeManifest(rec.substr(0, n)).ok()) << n;
  }
  for (size_t i = 0; i < rec.size(); ++i) {
    std::string bad = rec;
    bad[i] ^= 0x10;
    auto m = DecodeManifest(bad);
    ASSERT_FALSE(m.ok()) << i;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << i;
  }
}

TEST(ManifestTest, ValidateNamesTheBadField) {
  const Manifest good = MakeState().manifest;
  struct Case {
    const char* want;
    void (*mutate)(Manifest&);
  };
  const Case cases[] = {
      {"token_count", [](Manifest& m) { m.token_count = 0; }},
      {"no pages", [](Manifest& m) { m.pages.clear(); }},
      {"out of order", [](Manifest& m) { std::swap(m.pages[0], m.pages[1]); }},
      {"out of order", [](Manifest& m) { m.pages[1] = m.pages[0]; }},
      {"positions range", [](Manifest& m) { m.pages[0].last_position = -1; }},
      {"for a prefix of", [](Manifest& m) { m.pages.back().last_position = m.token_count; }},
      {"n_tokens", [](Manifest& m) { m.pages[0].n_tokens = 1000; }},
      {"importance", [](Manifest& m) { m.pages[2].importance = 1.5f; }},
      {"tier", [](Manifest& m) { m.pages[0].tier = static_cast<Tier>(9); }},
      {"size", [](Manifest& m) { m.pages[0].bytes = 10; }},
  };
  for (const Case& c : cases) {
    Manifest m = good;
    c.mutate(m);
    absl::Status s = ValidateManifest(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
  }
  ManifestLimits small;
  small.max_state_bytes = 100;
  absl::Status s = ValidateManifest(good, small);
  EXPECT_NE(s.message().find("exceeds the limit of 100 bytes"), std::string::npos) << s;
}

TEST(ManifestTest, CheckPageAcceptsGoodPagesAndRejectsMismatches) {
  TestState s = MakeState();
  for (size_t i = 0; i < s.pages.size(); ++i) {
    EXPECT_TRUE(CheckPage(s.manifest, s.manifest.pages[i], s.pages[i], true).ok());
    EXPECT_TRUE(CheckPage(s.manifest, s.manifest.pages[i], s.pages[i], false).ok());
  }
  // A page under another entry: layer / index mismatch.
  EXPECT_FALSE(CheckPage(s.manifest, s.manifest.pages[1], s.pages[0], true).ok());
  // A flipped payload bit: DataLoss either way.
  std::vector<uint8_t> bad = s.pages[0];
  bad[200] ^= 1;
  EXPECT_EQ(CheckPage(s.manifest, s.manifest.pages[0], bad, true).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(CheckPage(s.manifest, s.manifest.pages[0], bad, false).code(),
            absl::StatusCode::kDataLoss);
  // Another model: FailedPrecondition naming both fingerprints.
  Manifest other = s.manifest;
  other.model = TestModel(9);
  for (bool full : {true, false}) {
    absl::Status st = CheckPage(other, other.pages[0], s.pages[0], full);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.message().find(kvpage::ToHex(TestModel(9))), std::string::npos) << st;
    EXPECT_NE(st.message().find(kvpage::ToHex(TestModel(1))), std::string::npos) << st;
  }
  // Positions range in the manifest differs from the page's.
  Manifest shifted = s.manifest;
  shifted.pages[0].last_position += 1;
  EXPECT_EQ(CheckPage(shifted, shifted.pages[0], s.pages[0], true).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace glimpse::kvstate
