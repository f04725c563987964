// End to end on the real default model: the `--quick` suite under two methods, checking that the
// full-cache baseline is reported and that a budget of 1 reproduces it exactly.
#include <algorithm>

#include "core/eviction/eval/cache_contents.h"
#include "core/eviction/eval/laq.h"
#include "core/eviction/eval/metrics.h"
#include "core/eviction/eval/recall_eval.h"
#include "core/eviction/eval/report.h"
#include "core/eviction/eval/runner.h"
#include "core/eviction/eval/tasks.h"
#include "core/eviction/pipeline.h"
#include "core/model/generator.h"
#include "core/model/test_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction::eval {
namespace {

TEST(EvalTest, QuickSuiteFullBudgetEqualsBaseline) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  RunOptions options{.budgets = {0.2, 1.0}};
  auto arms = ArmsFor({"snapkv", "h2o"}, EvictionProfile());
  ASSERT_TRUE(arms.ok()) << arms.status();
  options.arms = *arms;
  std::vector<TaskScores> tasks;
  SuiteOptions quick = QuickSuiteOptions(1);
  quick.kinds = SyntheticTaskKinds();
  auto suite = GenerateSuite(quick);
  ASSERT_TRUE(suite.ok()) << suite.status();
  for (const Task& task : *suite) {
    auto scores = RunTask(*model, model::testing::SharedPool(), task, options);
    ASSERT_TRUE(scores.ok()) << scores.status();
    ASSERT_EQ(scores->runs.size(), 4u);
    EXPECT_EQ(scores->full.method, "full");
    EXPECT_EQ(scores->full.kl, 0.0);
    EXPECT_GT(scores->prefill_seconds, 0.0);
    for (const RunScores& run : scores->runs) {
      SCOPED_TRACE(run.method + " at " + std::to_string(run.budget));
      EXPECT_GE(run.kl, 0.0);
      EXPECT_GE(run.agreement, 0.0);
      EXPECT_LE(run.agreement, 1.0);
      if (run.budget == 1.0) {
        EXPECT_EQ(run.answer, scores->full.answer);
        EXPECT_EQ(run.correct, scores->full.correct);
        EXPECT_EQ(run.agreement, scores->full.agreement);
        EXPECT_EQ(run.kl, 0.0);
      }
    }
    tasks.push_back(*std::move(scores));
  }
  const std::vector<ReportRow> rows = Aggregate(tasks, options);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].method, "full");
  EXPECT_EQ(rows[0].tasks, 4);
  for (const ReportRow& row : rows) {
    if (row.budget == 1.0) {
      EXPECT_EQ(row.accuracy, rows[0].accuracy) << row.method;
      EXPECT_EQ(row.agreement, rows[0].agreement) << row.method;
      EXPECT_EQ(row.by_kind, rows[0].by_kind) << row.method;
      EXPECT_EQ(row.retained, 1.0) << row.method;  // every task the full cache answers
    }
  }
  const std::string table = MarkdownTable(rows);
  EXPECT_NE(table.find("| full | 100 % |"), std::string::npos) << table;
  std::printf("%s", table.c_str());
}

// The harness's shortcut (one prefill, cache contents swapped, continuations not kept) answers
// as the real path does: PrefillAndEvict of the prompt but its last token with the method's own
// scorer and the workers' selection, then Generate from the last token.
TEST(EvalTest, MatchesPrefillAndEvictThenGenerate) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const Task task = GenerateTask(TaskKind::kNeedleSingle, 11, 512);
  MethodSettings settings = *BuiltInSettings("snapkv");
  settings.scorer.window = 16;  // not the built-in: the arm's settings reach the scorer
  for (const double budget : {0.5, 0.2}) {
    RunOptions options{.budgets = {budget}};
    options.arms = {{.label = "snapkv", .settings = settings}};
    auto scores = RunTask(*model, model::testing::SharedPool(), task, options);
    ASSERT_TRUE(scores.ok()) << scores.status();

    const model::Tokenizer& tok = model->tokenizer();
    const std::vector<int32_t> prompt = EvictedPrompt(tok, task);
    model::Sequence session(*model, model::testing::SharedPool());
    auto scorer = CreateScorer(settings.scorer);
    ASSERT_TRUE(scorer.ok()) << scorer.status();
    const SelectionOptions selection = SelectionFor(settings, 16, budget, prompt.size());
    ASSERT_TRUE(PrefillAndEvict(session, prompt, **scorer, selection).ok());
    auto sampler = model::Sampler::Create({});
    ASSERT_TRUE(sampler.ok());
    auto generated = model::Generate(session, *sampler, TurnRows(tok, task, 0, false),
                                     options.max_answer_tokens);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto text = DecodeAnswer(tok, generated->tokens);  // as the harness decodes its answers
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, scores->runs[0].answer) << "budget " << budget;
    std::printf("budget %.1f: full '%s', evicted '%s'\n", budget, scores->full.answer.c_str(),
                text->c_str());
  }
}

// An answer cut inside a character (byte-level BPE splits them) still reads as valid UTF-8, and
// so fits a JSON report: found on 2026-11-28, when `glimpse eval --seed 3` ended in an exception
// writing eval.json.
TEST(EvalTest, AnswersCutInsideACharacterAreValidUtf8) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const model::Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> ids = tok.Encode("The keeper was Zoë.");
  int32_t lead = -1;  // a token whose text is the lead byte of a character and nothing more
  for (int32_t id = 0; id < tok.vocab_size() && lead < 0; ++id) {
    const auto text = tok.TokenText(id);
    if (text.ok() && text->size() == 1 && static_cast<unsigned char>((*text)[0]) >= 0xC2 &&
        static_cast<unsigned char>((*text)[0]) <= 0xDF) {
      lead = id;
    }
  }
  ASSERT_GE(lead, 0);
  std::vector<int32_t> cut = ids;
  cut.push_back(lead);
  auto raw = tok.Decode(cut);
  ASSERT_TRUE(raw.ok());
  EXPECT_THROW(nlohmann::json(*raw).dump(), nlohmann::json::type_error);  // what it replaces
  auto answer = DecodeAnswer(tok, cut);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, "The keeper was Zoë.\xEF\xBF\xBD");  // U+FFFD
  EXPECT_NO_THROW(nlohmann::json(*answer).dump());
}

// kl_only scores only the KL: the same KL as a full run, no answers.
TEST(EvalTest, KlOnlyRunsGiveTheSameKlWithoutAnswers) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const Task task = GenerateTask(TaskKind::kVariableTracking, 4, 512);
  RunOptions options{.budgets = {0.3}};
  options.arms = *ArmsFor({"streamingllm", "cake"}, EvictionProfile());
  auto full = RunTask(*model, model::testing::SharedPool(), task, options);
  ASSERT_TRUE(full.ok()) << full.status();
  options.kl_only = true;
  auto kl = RunTask(*model, model::testing::SharedPool(), task, options);
  ASSERT_TRUE(kl.ok()) << kl.status();
  ASSERT_EQ(kl->runs.size(), 2u);
  for (size_t i = 0; i < kl->runs.size(); ++i) {
    EXPECT_EQ(kl->runs[i].kl, full->runs[i].kl);
    EXPECT_GT(kl->runs[i].kl, 0.0);
    EXPECT_EQ(kl->runs[i].answer, "");
    EXPECT_NE(full->runs[i].answer, "");
  }
}

// LAQ's rescoring reads the draft rows' attention over the full cache: per (layer, kv-head) the
// unpooled scores are probabilities on prompt keys (each row's mass there is at most 1), and the
// session is left holding the full cache at the same position.
TEST(EvalTest, LaqScoresAreDraftAttentionOverTheFullCache) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const Task task = GenerateTask(TaskKind::kNeedleSingle, 3, 512);
  const model::Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> prompt = EvictedPrompt(tok, task);
  model::Sequence session(*model, model::testing::SharedPool());
  ASSERT_TRUE(session.Forward(prompt).ok());
  const std::vector<model::KvHead> full = Snapshot(session.cache());
  const int64_t T = static_cast<int64_t>(prompt.size());
  const int32_t L = session.cache().n_layers(), Hkv = session.cache().n_kv_heads();
  KeptEntries stage1(L, std::vector<std::vector<int64_t>>(Hkv));
  for (auto& layer : stage1) {
    for (auto& head : layer) {
      for (int64_t j = 0; j < T; j += 3) head.push_back(j);  // a third of the prompt
    }
  }
  const std::vector<int32_t> header = TurnRows(tok, task, 0, false);
  auto scores = LaqScores(session, full, stage1, header, {.draft_tokens = 8, .kernel = 1});
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), static_cast<size_t>(L));
  for (int32_t l = 0; l < L; ++l) {
    ASSERT_EQ((*scores)[l].size(), static_cast<size_t>(Hkv * T));
    for (int32_t h = 0; h < Hkv; ++h) {
      double sum = 0.0;
      for (int64_t j = 0; j < T; ++j) {
        const float s = (*scores)[l][h * T + j];
        ASSERT_GE(s, 0.0f);
        sum += s;
      }
      EXPECT_GT(sum, 0.0) << "layer " << l << " head " << h;
      EXPECT_LE(sum, 1.0 + 1e-4) << "layer " << l << " head " << h;
    }
  }
  EXPECT_EQ(session.next_position(), T);
  for (int32_t l = 0; l < L; ++l) {
    for (int32_t h = 0; h < Hkv; ++h) {
      EXPECT_EQ(session.cache().Read(l, h).positions, full[l * Hkv + h].positions);
    }
  }
}

// The multi-turn recall task: a budget of 1 evicts nothing (so it answers exactly as the full
// cache and has nothing to recall); at 20 % turn 2 is offered turn 1's evictions only with recall.
TEST(EvalTest, RecallTaskAtFullBudgetIsTheFullCacheAndOffersColdEntriesOnlyWithRecall) {
  const model::Model* model = model::testing::SharedDefaultModel();
  ASSERT_NE(model, nullptr);
  const Task task = GenerateTask(TaskKind::kTwoTurnQa, 5, 512);
  RecallEvalOptions options;
  options.budgets = {1.0, 0.2};
  auto scores = RunRecallTask(*model, model::testing::SharedPool(), task, options);
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->runs.size(), 4u);
  for (const RecallRun& run : scores->runs) {
    SCOPED_TRACE(std::to_string(run.budget) + (run.recall ? " with recall" : " without"));
    if (run.budget == 1.0) {
      EXPECT_EQ(run.answer, scores->full_answer);
      EXPECT_EQ(run.correct, scores->full_correct);
      EXPECT_EQ(run.candidates, 0);
      continue;
    }
    if (!run.recall) {
      EXPECT_EQ(run.candidates, 0);
      continue;
    }
    EXPECT_GT(run.candidates, 0);
    EXPECT_LE(run.recalled, run.candidates);
  }
  EXPECT_NE(RecallReport("two_turn_qa", {*scores}).find("| 20% |"), std::string::npos);
  const Task single = GenerateTask(TaskKind::kNeedleSingle, 5, 512);
  EXPECT_EQ(RunRecallTask(*model, model::testing::SharedPool(), single, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The names family's second turn (a name turn 1 never asked for) runs alike, scored by name.
  auto names =
      GenerateSuite({.tasks_per_kind = 1, .lengths = {512}, .kinds = {TaskKind::kNamesTwoTurn}});
  ASSERT_TRUE(names.ok()) << names.status();
  options.budgets = {1.0};
  auto named = RunRecallTask(*model, model::testing::SharedPool(), names->front(), options);
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_EQ(named->runs.size(), 2u);
  EXPECT_EQ(named->runs[1].answer, named->full_answer);
  EXPECT_EQ(named->full_correct, AnswerMatches(named->full_answer, names->front().turns[1].answer));
}

}  // namespace
}  // namespace glimpse::eviction::eval
