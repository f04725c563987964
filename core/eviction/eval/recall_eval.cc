#include "core/eviction/eval/recall_eval.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/metrics.h"
#include "core/eviction/eval/runner.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/recall.h"
#include "core/eviction/scorer.h"
#include "core/model/generator.h"
#include "core/model/sampler.h"
#include "core/model/sequence.h"

namespace glimpse::eviction::eval {
namespace {

// A turn's greedy answer; its last token is sampled but not fed yet (model::DecodeFrom).
struct Answer {
  std::vector<int32_t> tokens;
  bool ended = false;  // stopped on an end-of-generation token
};

absl::StatusOr<Answer> Decode(model::Sequence& session, std::vector<float> logits,
                              int32_t max_tokens) {
  ASSIGN_OR_RETURN(model::Sampler greedy, model::Sampler::Create({}));
  ASSIGN_OR_RETURN(model::GenerationResult gen,
                   model::DecodeFrom(session, greedy, std::move(logits), max_tokens,
                                     [](int32_t) { return true; }));
  Answer out;
  out.tokens = std::move(gen.tokens);
  out.ended =
      !out.tokens.empty() && session.model().tokenizer().IsEndOfGeneration(out.tokens.back());
  return out;
}

absl::StatusOr<std::string> AnswerText(const model::Tokenizer& tok, const Answer& a) {
  std::vector<int32_t> ids = a.tokens;
  if (a.ended) ids.pop_back();
  return DecodeAnswer(tok, ids);
}

// Turn 2's rows: turn 1's unfed last token, then the close of its answer and question 2.
std::vector<int32_t> SecondTurnRows(const model::Tokenizer& tok, const Task& task,
                                    const Answer& first) {
  std::vector<int32_t> rows = TurnRows(tok, task, 1, first.ended);
  if (!first.tokens.empty()) rows.insert(rows.begin(), first.tokens.back());
  return rows;
}

// A turn as the workers run it (worker::PrefillTurn): every row but the last prefilled with
// eviction under `settings` at `ratio` of the tokens so far, then the last row fed.
absl::StatusOr<EvictionResult> EvictTurn(model::Sequence& session, std::span<const int32_t> rows,
                                         const Scorer& scorer, const MethodSettings& settings,
                                         double ratio, const RecallEvalOptions* recall,
                                         const std::vector<model::KvHead>* cold) {
  const std::span<const int32_t> evicted = rows.first(rows.size() - 1);
  const SelectionOptions selection =
      SelectionFor(settings, scorer.window(), ratio,
                   session.next_position() + static_cast<int64_t>(evicted.size()));
  std::optional<RecallRequest> request;
  if (recall != nullptr) {
    request = RecallRequest{
        .cold = *cold,
        .candidate_tokens = static_cast<int64_t>(
            std::ceil(recall->recall_share * static_cast<double>(selection.budget_tokens))),
        .page_tokens = recall->recall_page_tokens};
  }
  ASSIGN_OR_RETURN(EvictionResult result, PrefillAndEvict(session, evicted, scorer, selection,
                                                          request ? &*request : nullptr));
  ASSIGN_OR_RETURN(result.last_logits, session.Forward(rows.last(1)));
  return result;
}

std::vector<model::KvHead> Flatten(std::vector<std::vector<model::KvHead>> evicted) {
  std::vector<model::KvHead> out;
  for (auto& layer : evicted) {
    for (model::KvHead& head : layer) out.push_back(std::move(head));
  }
  return out;
}

// One budget, without or with recall.
absl::StatusOr<RecallRun> RunTurns(const model::Model& model, kernels::ThreadPool& pool,
                                   const Task& task, std::span<const int32_t> prompt,
                                   const Scorer& scorer, const RecallEvalOptions& o, double budget,
                                   bool recall) {
  const model::Tokenizer& tok = model.tokenizer();
  model::Sequence session(model, pool);
  ASSIGN_OR_RETURN(EvictionResult first,
                   EvictTurn(session, prompt, scorer, o.settings, budget, nullptr, nullptr));
  ASSIGN_OR_RETURN(const Answer answer1,
                   Decode(session, std::move(first.last_logits), o.max_answer_tokens));
  const std::vector<model::KvHead> cold = Flatten(std::move(first.evicted));
  ASSIGN_OR_RETURN(EvictionResult second,
                   EvictTurn(session, SecondTurnRows(tok, task, answer1), scorer, o.settings,
                             budget, recall ? &o : nullptr, &cold));
  ASSIGN_OR_RETURN(const Answer answer2,
                   Decode(session, std::move(second.last_logits), o.max_answer_tokens));
  RecallRun run{.budget = budget,
                .recall = recall,
                .candidates = second.recall_candidates,
                .recalled = second.recalled};
  ASSIGN_OR_RETURN(run.answer, AnswerText(tok, answer2));
  run.correct = AnswerMatches(run.answer, task.turns[1].answer);
  return run;
}

// The full cache's turn-2 answer.
absl::StatusOr<std::string> FullAnswer(const model::Model& model, kernels::ThreadPool& pool,
                                       const Task& task, std::span<const int32_t> prompt,
                                       int32_t max_tokens) {
  model::Sequence session(model, pool);
  ASSIGN_OR_RETURN(std::vector<float> logits, session.Forward(prompt));
  ASSIGN_OR_RETURN(const Answer answer1, Decode(session, std::move(logits), max_tokens));
  ASSIGN_OR_RETURN(logits, session.Forward(SecondTurnRows(model.tokenizer(), task, answer1)));
  ASSIGN_OR_RETURN(const Answer answer2, Decode(session, std::move(logits), max_tokens));
  return AnswerText(model.tokenizer(), answer2);
}

}  // namespace

absl::StatusOr<RecallTaskScores> RunRecallTask(const model::Model& model, kernels::ThreadPool& pool,
                                               const Task& task, const RecallEvalOptions& options) {
  if (task.turns.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("the recall task runs two-turn tasks, not ",
                                                   std::string(TaskKindName(task.kind))));
  }
  for (double b : options.budgets) {
    if (!(b > 0.0 && b <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat("budget ", b, " is outside (0, 1]"));
    }
  }
  RecallEvalOptions o = options;
  if (o.settings.scorer.method.empty()) {
    ASSIGN_OR_RETURN(o.settings, BuiltInSettings("snapkv"));
  }
  ScorerConfig config = o.settings.scorer;
  RETURN_IF_ERROR(AttachLearnedFiles(config, o.lookahead_module));
  ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, CreateScorer(config));
  const model::Tokenizer& tok = model.tokenizer();
  const std::vector<int32_t> prompt =
      tok.Encode(tok.ApplyChatTemplate({{"user", FirstUserMessage(task)}}, true));
  RecallTaskScores out;
  out.seed = task.seed;
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  ASSIGN_OR_RETURN(out.full_answer,
                   FullAnswer(model, pool, task, prompt, options.max_answer_tokens));
  out.full_correct = AnswerMatches(out.full_answer, task.turns[1].answer);
  for (double budget : options.budgets) {
    for (bool recall : {false, true}) {
      ASSIGN_OR_RETURN(RecallRun run,
                       RunTurns(model, pool, task, prompt, *scorer, o, budget, recall));
      out.runs.push_back(std::move(run));
    }
  }
  return out;
}

std::string RecallReport(std::string_view family, const std::vector<RecallTaskScores>& tasks) {
  struct Row {
    int n = 0, without = 0, with = 0;
    double candidates = 0, recalled = 0;
  };
  std::map<double, Row> rows;
  int full = 0;
  for (const RecallTaskScores& t : tasks) {
    full += t.full_correct ? 1 : 0;
    for (const RecallRun& r : t.runs) {
      Row& row = rows[r.budget];
      if (!r.recall) {
        ++row.n;
        row.without += r.correct ? 1 : 0;
        continue;
      }
      row.with += r.correct ? 1 : 0;
      row.candidates += static_cast<double>(r.candidates);
      row.recalled += static_cast<double>(r.recalled);
    }
  }
  std::string out = absl::StrFormat(
      "%s, turn 2 answered over the evicted cache (%d tasks; full cache: %d correct)\n\n"
      "| budget | correct without recall | correct with recall | cold entries offered / task | "
      "recalled (kept) / task |\n|---|---|---|---|---|\n",
      family, static_cast<int>(tasks.size()), full);
  for (const auto& [budget, row] : rows) {
    const double n = std::max(row.n, 1);
    absl::StrAppendFormat(&out, "| %.0f%% | %d / %d | %d / %d | %.0f | %.0f |\n", 100 * budget,
                          row.without, row.n, row.with, row.n, row.candidates / n,
                          row.recalled / n);
  }
  return out;
}

}  // namespace glimpse::eviction::eval
