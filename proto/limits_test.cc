#include "proto/limits.h"

#include <string>

#include "gtest/gtest.h"

namespace glimpse::v1 {
namespace {

TEST(CheckIdTest, AcceptsOneToMaxBytesOfTheAllowedCharacters) {
  EXPECT_TRUE(CheckId("session_id", "a").ok());
  EXPECT_TRUE(CheckId("session_id", "Agent-7.turn_2:x").ok());
  EXPECT_TRUE(CheckId("session_id", std::string(kMaxIdBytes, 'z')).ok());
}

TEST(CheckIdTest, RefusesEmptyLongAndOtherCharactersNamingTheField) {
  absl::Status empty = CheckId("node_id", "");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(), "node_id is empty");
  absl::Status longer = CheckId("node_id", std::string(kMaxIdBytes + 1, 'z'));
  EXPECT_EQ(longer.message(), "node_id is 129 bytes long (at most 128)");
  // A byte no terminal should print comes back escaped.
  absl::Status odd = CheckId("tenant", std::string("a\nb", 3));
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.message(),
            "tenant \"a\\nb\" has the character 0x0a (allowed: letters, digits, . _ : -)");
}

TEST(CheckToolNameTest, RefusesOnlyNamesOverTheLimit) {
  EXPECT_TRUE(CheckToolName("tool_name", "").ok());
  EXPECT_TRUE(CheckToolName("tool_name", std::string(kMaxToolNameBytes, 't')).ok());
  EXPECT_EQ(CheckToolName("tool_name", std::string(kMaxToolNameBytes + 1, 't')).message(),
            "tool_name is 129 bytes (at most 128)");
}

}  // namespace
}  // namespace glimpse::v1
