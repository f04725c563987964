#include "core/kvstate/state_key.h"

#include <vector>

#include "gtest/gtest.h"

namespace glimpse::kvstate {
namespace {

TEST(StateKeyTest, NamespaceDependsOnEveryPart) {
  Fingerprint a{}, b{};
  b[3] = 1;
  const NamespaceKey base = MakeNamespaceKey("salt", a, "snapkv");
  EXPECT_EQ(base, MakeNamespaceKey("salt", a, "snapkv"));
  EXPECT_NE(base, MakeNamespaceKey("salt2", a, "snapkv"));
  EXPECT_NE(base, MakeNamespaceKey("salt", b, "snapkv"));
  EXPECT_NE(base, MakeNamespaceKey("salt", a, "h2o"));
  // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
  EXPECT_NE(MakeNamespaceKey("ab", a, "c"), MakeNamespaceKey("a", a, "bc"));
}

TEST(StateKeyTest, PrefixHasherMatchesOneShotKeysAtEveryLength) {
  const NamespaceKey ns = MakeNamespaceKey("t", Fingerprint{}, "p");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 300; ++i) tokens.push_back(i * 7 % 101);
  PrefixHasher h(ns);
  EXPECT_EQ(h.Key(), MakeStateKey(ns, {}));
  for (size_t n = 1; n <= tokens.size(); ++n) {
    h.Append(std::span<const int32_t>(tokens).subspan(n - 1, 1));
    ASSERT_EQ(h.Key(), MakeStateKey(ns, std::span<const int32_t>(tokens).first(n))) << n;
  }
  EXPECT_EQ(h.tokens(), tokens.size());
}

TEST(StateKeyTest, DifferentTokensOrNamespaceGiveDifferentKeys) {
  const NamespaceKey ns1 = MakeNamespaceKey("t", Fingerprint{}, "p");
  const NamespaceKey ns2 = MakeNamespaceKey("u", Fingerprint{}, "p");
  const std::vector<int32_t> x = {1, 2, 3}, y = {1, 2, 4};
  EXPECT_NE(MakeStateKey(ns1, x), MakeStateKey(ns1, y));
  EXPECT_NE(MakeStateKey(ns1, x), MakeStateKey(ns2, x));
}

TEST(FingerprintFromHexTest, ParsesTheModelsHexAndRejectsAnythingElse) {
  auto f = FingerprintFromHex("17f1ae519c28bd6a26fafb69beb2478E");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(kvpage::ToHex(*f), "17f1ae519c28bd6a26fafb69beb2478e");
  for (const char* bad :
       {"", "17f1", "17f1ae519c28bd6a26fafb69beb2478g", "17f1ae519c28bd6a26fafb69beb2478e00"}) {
    auto s = FingerprintFromHex(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace glimpse::kvstate
