#include "core/common/fnv1a.h"

#include "gtest/gtest.h"

namespace glimpse {
namespace {

// Reference values of the published FNV-1a 64-bit test vectors.
TEST(Fnv1a64, MatchesPublishedVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

}  // namespace
}  // namespace glimpse
