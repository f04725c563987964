// The suite's generators: deterministic from the seed, answers planted in the haystack, sizes.
#include "core/eviction/eval/tasks.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace glimpse::eviction::eval {
namespace {

int64_t Count(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TasksTest, SameSeedSameTask) {
  for (TaskKind kind : SyntheticTaskKinds()) {
    const Task a = GenerateTask(kind, 42, 1024), b = GenerateTask(kind, 42, 1024);
    EXPECT_EQ(a.context, b.context) << TaskKindName(kind);
    ASSERT_EQ(a.turns.size(), b.turns.size());
    for (size_t t = 0; t < a.turns.size(); ++t) {
      EXPECT_EQ(a.turns[t].question, b.turns[t].question);
      EXPECT_EQ(a.turns[t].answer, b.turns[t].answer);
    }
    EXPECT_NE(a.context, GenerateTask(kind, 43, 1024).context) << TaskKindName(kind);
  }
}

TEST(TasksTest, KnownTaskIsStable) {
  // Pins the generator: a change here changes every published number.
  const Task task = GenerateTask(TaskKind::kNeedleSingle, 7, 128);
  EXPECT_EQ(task.turns.size(), 1u);
  EXPECT_EQ(Count(task.context, "The secret code for the "), 1);
  EXPECT_EQ(Count(task.context, "."), (128 - 48) / 10 + 1);  // filler + the needle
}

TEST(TasksTest, AnswersArePlantedInTheHaystack) {
  for (TaskKind kind : SyntheticTaskKinds()) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      const Task task = GenerateTask(kind, seed, 512);
      SCOPED_TRACE(absl::StrCat(std::string(TaskKindName(kind)), " seed ", seed));
      std::set<std::string> answers;
      for (const QaTurn& turn : task.turns) {
        ASSERT_FALSE(turn.answer.empty());
        answers.insert(turn.answer);
        switch (kind) {
          case TaskKind::kVariableTracking:
            EXPECT_EQ(Count(task.context, absl::StrCat(" is changed to ", turn.answer, ".")), 1);
            break;
          default:
            EXPECT_EQ(Count(task.context, absl::StrCat(" door is ", turn.answer, ".")), 1);
            EXPECT_NE(turn.question.find("door?"), std::string::npos);
        }
      }
      EXPECT_EQ(answers.size(), task.turns.size());  // turns ask different things
      const size_t turns = kind == TaskKind::kTwoTurnQa ? 2 : 1;
      EXPECT_EQ(task.turns.size(), turns);
      const int64_t doors = Count(task.context, "The secret code for the ");
      EXPECT_EQ(doors, kind == TaskKind::kNeedleSingle  ? 1
                       : kind == TaskKind::kNeedleMulti ? 4
                       : kind == TaskKind::kTwoTurnQa   ? 2
                                                        : 0);
      if (kind == TaskKind::kVariableTracking) {
        EXPECT_EQ(Count(task.context, " is set to "), 2);
        // The asked variable's first value precedes its final value.
        EXPECT_LT(task.context.find(" is set to "), task.context.find(" is changed to "));
      }
    }
  }
}

TEST(TasksTest, SuiteInterleavesKindsAndVariesLength) {
  auto suite = GenerateSuite({.tasks_per_kind = 3, .seed = 5});
  ASSERT_TRUE(suite.ok()) << suite.status();
  const std::vector<TaskKind> kinds = AllTaskKinds();
  ASSERT_EQ(suite->size(), 3 * kinds.size());
  std::set<int32_t> lengths;
  std::set<uint64_t> seeds;
  for (size_t i = 0; i < suite->size(); ++i) {
    EXPECT_EQ((*suite)[i].kind, kinds[i % kinds.size()]);
    lengths.insert((*suite)[i].target_tokens);
    seeds.insert((*suite)[i].seed);
  }
  EXPECT_GE(lengths.size(), 3u);
  EXPECT_EQ(seeds.size(), suite->size());
  // A longer target gives a proportionally longer haystack.
  const Task short_task = GenerateTask(TaskKind::kNeedleSingle, 1, 512);
  const Task long_task = GenerateTask(TaskKind::kNeedleSingle, 1, 2048);
  EXPECT_NEAR(static_cast<double>(long_task.context.size()) / short_task.context.size(),
              (2048.0 - 48) / (512 - 48), 0.3);
  EXPECT_EQ(GenerateSuite(QuickSuiteOptions(1))->size(), kinds.size());
  // Choosing kinds leaves the others' tasks as they were.
  auto one =
      GenerateSuite({.tasks_per_kind = 3, .seed = 5, .kinds = {TaskKind::kPhraseInGlossary}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[1].context, (*suite)[kinds.size() + 6].context);
}

TEST(TasksTest, FirstUserMessageEndsWithTheQuestion) {
  const Task task = GenerateTask(TaskKind::kTwoTurnQa, 3, 256);
  const std::string message = FirstUserMessage(task);
  EXPECT_EQ(message.rfind(task.turns[0].question), message.size() - task.turns[0].question.size());
  EXPECT_EQ(task.turns[1].question.rfind("And what is", 0), 0u);
}

}  // namespace
}  // namespace glimpse::eviction::eval
