#include "core/model/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::model {
namespace {

// Pushes `pieces` and returns what was shown, with "|" where Push said it stopped.
std::string Shown(StopStrings& s, const std::vector<std::string>& pieces) {
  std::string shown;
  for (const std::string& p : pieces) {
    StopStrings::Step step = s.Push(p);
    shown += step.text;
    if (step.stopped) shown += "|";
  }
  return shown + s.Finish();
}

TEST(StopStringsTest, WithoutStringsEveryPieceShowsAtOnce) {
  StopStrings s = *StopStrings::Create({});
  EXPECT_EQ(s.Push("Hel").text, "Hel");
  EXPECT_EQ(s.Push("lo").text, "lo");
  EXPECT_EQ(s.Finish(), "");
}

TEST(StopStringsTest, TheTextEndsBeforeTheFirstStopStringAcrossPieces) {
  StopStrings s = *StopStrings::Create({"\n\n", "END"});
  EXPECT_EQ(Shown(s, {"one E", "N", "D two"}), "one |");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.Push("more").text, "");
}

TEST(StopStringsTest, ThePossibleStartOfAStringWaitsAndShowsWhenItDoesNotComplete) {
  StopStrings s = *StopStrings::Create({"</tool>"});
  StopStrings::Step a = s.Push("text </to");
  EXPECT_EQ(a.text, "text ");
  EXPECT_FALSE(a.stopped);
  StopStrings::Step b = s.Push("p>");
  EXPECT_EQ(b.text, "</top>");
  EXPECT_EQ(s.Push("<").text, "");
  EXPECT_EQ(s.Finish(), "<");
}

TEST(StopStringsTest, TheEarliestOfSeveralMatchesWins) {
  StopStrings s = *StopStrings::Create({"bc", "abcd", "x"});
  EXPECT_EQ(Shown(s, {"zabcdx"}), "z|");
}

TEST(StopStringsTest, AStringInsideOnePieceStopsAtIt) {
  StopStrings s = *StopStrings::Create({"User:"});
  EXPECT_EQ(Shown(s, {"Sure.", " User: hi"}), "Sure. |");
}

TEST(StopStringsTest, BadListsAreRefusedNamingTheEntry) {
  EXPECT_EQ(StopStrings::Create({"a", "b", "c", "d", "e"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status empty = StopStrings::Create({"a", ""}).status();
  EXPECT_NE(empty.message().find("stop[1]"), std::string::npos) << empty;
  EXPECT_FALSE(StopStrings::Create({std::string(kMaxStopBytes + 1, 'x')}).ok());
  EXPECT_TRUE(StopStrings::Create({std::string(kMaxStopBytes, 'x')}).ok());
}

}  // namespace
}  // namespace glimpse::model
