#include "core/cache_client/proto_convert.h"

#include "core/kvstate/test_state.h"
#include "gtest/gtest.h"

namespace glimpse::cache_client {
namespace {

TEST(ProtoConvertTest, ManifestRoundTrip) {
  auto s = kvstate::testing::MakeTestState(kvstate::testing::TestNamespace(),
                                           kvstate::testing::TestModel(), {}, 3);
  ASSERT_TRUE(s.ok());
  s->manifest.created_unix_micros = 42;
  v1::StateManifest p;
  ManifestToProto(s->manifest, &p);
  EXPECT_EQ(p.pages(1).tier(), v1::PAGE_TIER_EVICTED);
  auto back = ManifestFromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->SameContent(s->manifest));
  EXPECT_EQ(back->created_unix_micros, 42);
}

TEST(ProtoConvertTest, RejectsBadKeysAndTiers) {
  auto s = kvstate::testing::MakeTestState(kvstate::testing::TestNamespace(),
                                           kvstate::testing::TestModel(), {}, 3);
  ASSERT_TRUE(s.ok());
  v1::StateManifest good;
  ManifestToProto(s->manifest, &good);
  v1::StateManifest p = good;
  p.set_state_key("abc");
  EXPECT_NE(ManifestFromProto(p).status().message().find("manifest.state_key is 3 bytes"),
            std::string::npos);
  p = good;
  p.mutable_model()->set_digest(std::string(17, 'x'));
  EXPECT_EQ(ManifestFromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.mutable_pages(0)->set_tier(v1::PAGE_TIER_UNSPECIFIED);
  EXPECT_NE(ManifestFromProto(p).status().message().find("page 0 has tier 0"), std::string::npos);
  EXPECT_EQ(Key16FromBytes(std::string(16, 'k'), "k").value()[15], 'k');
}

}  // namespace
}  // namespace glimpse::cache_client
