// The text families: sentences parsed from the Debian files, tasks deterministic from the seed,
// every answer planted once, sized to the target.
#include "core/eviction/eval/text_tasks.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace glimpse::eviction::eval {
namespace {

int64_t CountLower(const std::string& text, const std::string& what) {
  const std::string t = absl::AsciiStrToLower(text), w = absl::AsciiStrToLower(what);
  int64_t n = 0;
  for (size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) ++n;
  return n;
}

class TextTasksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto corpus = TextCorpus::Load();
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    corpus_ = new TextCorpus(*std::move(corpus));
  }
  static void TearDownTestSuite() { delete corpus_; }
  static const TextCorpus* corpus_;
};

const TextCorpus* TextTasksTest::corpus_ = nullptr;

TEST_F(TextTasksTest, ParsesGlossarySentencesAndQuotations) {
  EXPECT_GE(corpus_->glossary().size(), 10000u);
  EXPECT_GE(corpus_->quotes().size(), 300u);
  for (const std::string& s : corpus_->glossary()) {
    ASSERT_TRUE(s.rfind("A ", 0) == 0 || s.rfind("An ", 0) == 0) << s;
    ASSERT_EQ(s.back(), '.') << s;
  }
}

TEST_F(TextTasksTest, TasksAreDeterministicSizedAndTheirAnswersPlantedOnce) {
  const std::vector<TaskKind> kinds = {TaskKind::kNameInGlossary, TaskKind::kNameInQuotes,
                                       TaskKind::kPhraseInGlossary, TaskKind::kNamesTwoTurn};
  for (TaskKind kind : kinds) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      SCOPED_TRACE(absl::StrCat(std::string(TaskKindName(kind)), " seed ", seed));
      auto task = corpus_->Generate(kind, seed, 1024);
      ASSERT_TRUE(task.ok()) << task.status();
      EXPECT_TRUE(IsTextFamily(kind));
      EXPECT_EQ(task->turns.size(), kind == TaskKind::kNamesTwoTurn ? 2u : 1u);
      EXPECT_NEAR(static_cast<double>(task->context.size()), (1024 - 60) * 4, 600);
      for (const QaTurn& turn : task->turns) {
        EXPECT_EQ(CountLower(task->context, turn.answer), 1) << turn.answer;
        // The question names the role, the answer is not in it.
        EXPECT_EQ(CountLower(turn.question, turn.answer), 0);
      }
      if (task->turns.size() == 2) {
        EXPECT_NE(task->turns[0].answer, task->turns[1].answer);
        EXPECT_EQ(task->turns[1].question.rfind("And who was the ", 0), 0u);
      }
      auto again = corpus_->Generate(kind, seed, 1024);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(again->context, task->context);
      EXPECT_EQ(again->turns[0].question, task->turns[0].question);
    }
  }
  EXPECT_FALSE(IsTextFamily(TaskKind::kNeedleSingle));
  EXPECT_EQ(corpus_->Generate(TaskKind::kNeedleSingle, 1, 512).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TextCorpusTest, AMissingFileNamesItsPackage) {
  TextCorpusPaths paths;
  paths.wordnet_nouns = "/nonexistent/data.noun";
  auto corpus = TextCorpus::Load(paths);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(corpus.status().message().find("wordnet-base"), std::string::npos);
}

}  // namespace
}  // namespace glimpse::eviction::eval
