#include "core/eviction/eval/runner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/eviction/eval/cache_contents.h"
#include "core/eviction/eval/continuation.h"
#include "core/eviction/eval/laq.h"
#include "core/eviction/eval/metrics.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/scorer.h"
#include "core/eviction/selection.h"

namespace glimpse::eviction::eval {
namespace {

using Clock = std::chrono::steady_clock;

// Arms share a scorer when their scorer configs are equal.
std::string ScorerKey(const ScorerConfig& c) {
  return absl::StrCat(c.method, "|", c.window, "|", c.kernel, "|", c.pooling);
}

// A scorer holding several: needs and window are the union / maximum of its members', Score()
// runs and times every member and records its scores (and, for members that rank layers, CAKE,
// their layer preference); it reports zeros (the prefill keeps all). The pipeline scores layers
// concurrently, so every (member, layer) has its own slots, sized up front: Score() writes only
// its layer's.
class MultiScorer : public Scorer {
 public:
  explicit MultiScorer(int32_t n_layers) : n_layers_(n_layers) {}

  // Adds the member for `config` unless one with the same key exists; its index either way.
  absl::StatusOr<size_t> Add(const ScorerConfig& config) {
    const std::string key = ScorerKey(config);
    if (auto it = index_.find(key); it != index_.end()) return it->second;
    ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, CreateScorer(config));
    index_[key] = members_.size();
    members_.push_back(std::move(scorer));
    scores_.emplace_back(n_layers_);
    preferences_.emplace_back(n_layers_, 0.0);
    seconds_.emplace_back(n_layers_, 0.0);
    return members_.size() - 1;
  }

  std::string_view name() const override { return "eval-multi"; }
  uint32_t needs() const override {
    uint32_t needs = 0;
    for (const auto& m : members_) needs |= m->needs();
    return needs;
  }
  int64_t window() const override {
    int64_t window = 0;
    for (const auto& m : members_) window = std::max(window, m->window());
    return window;
  }
  const LookaheadModule* lookahead_module() const override {
    for (const auto& m : members_) {
      if (m->lookahead_module() != nullptr) return m->lookahead_module();
    }
    return nullptr;
  }
  absl::Status Score(const LayerView& view, float* scores) const override {
    const int64_t n = int64_t{view.n_kv_heads} * view.n_tokens;
    if (view.n_layers != n_layers_) {
      return absl::InternalError(
          absl::StrCat("eval scorer sized for ", n_layers_, " layers, got ", view.n_layers));
    }
    for (size_t i = 0; i < members_.size(); ++i) {
      std::vector<float>& layer = scores_[i][view.layer];
      layer.assign(n, 0.0f);
      const Clock::time_point start = Clock::now();
      if (members_[i]->has_layer_preference()) {
        RETURN_IF_ERROR(
            members_[i]->ScoreWithPreference(view, layer.data(), &preferences_[i][view.layer]));
      } else {
        RETURN_IF_ERROR(members_[i]->Score(view, layer.data()));
      }
      seconds_[i][view.layer] = SecondsSince(start);
    }
    std::fill(scores, scores + n, 0.0f);
    return absl::OkStatus();
  }

  const Scorer& member(size_t i) const { return *members_[i]; }
  const std::vector<std::vector<float>>& scores(size_t i) const { return scores_[i]; }
  // [layer] the member's layer preferences (zeros unless it ranks layers).
  const std::vector<double>& preferences(size_t i) const { return preferences_[i]; }
  // Scoring time summed over layers (CPU seconds when layers ran in parallel).
  double seconds(size_t i) const {
    return std::accumulate(seconds_[i].begin(), seconds_[i].end(), 0.0);
  }

 private:
  const int32_t n_layers_;
  std::vector<std::unique_ptr<Scorer>> members_;
  std::map<std::string, size_t> index_;
  mutable std::vector<std::vector<std::vector<float>>> scores_;  // [member][layer][Hkv · T]
  mutable std::vector<std::vector<double>> preferences_;         // [member][layer]
  mutable std::vector<std::vector<double>> seconds_;             // [member][layer]
};

// The scorer config an arm runs: its settings' plus the model's learned file for LookaheadKV and
// the gates (AttachLearnedFiles).
absl::StatusOr<ScorerConfig> ConfigOf(const Arm& arm, const RunOptions& options) {
  ScorerConfig config = arm.settings.scorer;
  RETURN_IF_ERROR(AttachLearnedFiles(config, options.lookahead_module));
  return config;
}

// Answers of earlier runs of a task, per turn (drafts for the next runs' decoding).
using Answers = std::vector<std::vector<std::vector<int32_t>>>;

// The full cache's greedy answers, turn by turn, as the reference script: incremental decode in
// `session`, which holds the plain prefill of the prompt (and keeps what it decodes).
absl::StatusOr<Script> ReferenceScript(model::Sequence& session, const Task& task,
                                       int32_t max_tokens) {
  const model::Tokenizer& tok = session.model().tokenizer();
  Script script;
  int32_t unfed = -1;  // the previous turn's end-of-generation token, not yet in the session
  for (size_t t = 0; t < task.turns.size(); ++t) {
    std::vector<int32_t> rows = TurnRows(tok, task, t, unfed >= 0);
    script.tokens.insert(script.tokens.end(), rows.begin(), rows.end());
    if (unfed >= 0) rows.insert(rows.begin(), unfed);
    script.answer_begin.push_back(static_cast<int64_t>(script.tokens.size()));
    ASSIGN_OR_RETURN(std::vector<float> logits, session.Forward(rows));
    unfed = -1;
    while (true) {
      const int32_t token = Argmax(logits);
      script.tokens.push_back(token);
      if (tok.IsEndOfGeneration(token)) {
        unfed = token;
        break;
      }
      if (static_cast<int64_t>(script.tokens.size()) - script.answer_begin.back() >= max_tokens) {
        break;
      }
      const int32_t next[] = {token};
      ASSIGN_OR_RETURN(logits, session.Forward(next));
    }
    if (unfed < 0 && t + 1 < task.turns.size()) {
      // Stopped at the limit: the last token is not in the session yet either.
      const int32_t last[] = {script.tokens.back()};
      RETURN_IF_ERROR(session.Forward(last).status());
    }
    script.answer_end.push_back(static_cast<int64_t>(script.tokens.size()));
  }
  return script;
}

// Scores the session's current cache against the script and the full cache's log-probs.
absl::StatusOr<RunScores> ScoreCache(model::Sequence& session, const Task& task,
                                     const Script& script,
                                     const std::vector<std::vector<double>>* full_log_probs,
                                     const RunOptions& options, Answers& seen,
                                     ContinuationScores* raw = nullptr) {
  ASSIGN_OR_RETURN(ContinuationScores c,
                   ScoreContinuation(session, script, options.max_answer_tokens, seen,
                                     /*answers=*/!options.kl_only));
  seen.resize(c.answers.size());
  for (size_t t = 0; t < c.answers.size(); ++t) seen[t].push_back(c.answers[t]);
  RunScores run;
  const std::span<const int32_t> all(script.tokens);
  for (size_t t = 0; t < c.answers.size(); ++t) {
    const int64_t begin = script.answer_begin[t];
    run.agreement += GreedyAgreement(c.answers[t], all.subspan(begin, script.answer_end[t] - begin),
                                     options.max_answer_tokens);
  }
  run.agreement /= static_cast<double>(std::max<size_t>(c.answers.size(), 1));
  if (!c.answers.empty()) {
    std::vector<int32_t> last = c.answers.back();
    if (!last.empty() && session.model().tokenizer().IsEndOfGeneration(last.back())) {
      last.pop_back();
    }
    ASSIGN_OR_RETURN(run.answer, DecodeAnswer(session.model().tokenizer(), last));
    run.correct = AnswerMatches(run.answer, task.turns.back().answer);
  }
  const std::vector<std::vector<double>>& reference =
      full_log_probs != nullptr ? *full_log_probs : c.log_probs;
  for (size_t r = 0; r < c.log_probs.size(); ++r) {
    run.kl += KlDivergence(reference[r], c.log_probs[r]);
  }
  run.kl /= static_cast<double>(std::max<size_t>(c.log_probs.size(), 1));
  if (raw != nullptr) *raw = std::move(c);
  return run;
}

// The plain prefill (timed: the denominator of the scoring overhead) and, continuing it, the full
// cache's reference answers, in a session of their own.
absl::StatusOr<Script> PlainPrefill(const model::Model& model, kernels::ThreadPool& pool,
                                    std::span<const int32_t> prompt, const Task& task,
                                    const RunOptions& options, double& seconds) {
  model::Sequence plain(model, pool);
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(plain.Forward(prompt).status());
  seconds = SecondsSince(start);
  return ReferenceScript(plain, task, options.max_answer_tokens);
}

}  // namespace

std::vector<int32_t> EvictedPrompt(const model::Tokenizer& tok, const Task& task) {
  std::vector<int32_t> prompt =
      tok.Encode(tok.ApplyChatTemplate({{"user", FirstUserMessage(task)}}, true));
  prompt.pop_back();
  return prompt;
}

std::vector<int32_t> TurnRows(const model::Tokenizer& tok, const Task& task, size_t t,
                              bool previous_ended) {
  if (t == 0) {
    return {tok.Encode(tok.ApplyChatTemplate({{"user", FirstUserMessage(task)}}, true)).back()};
  }
  return tok.Encode(absl::StrCat(previous_ended ? "\n" : "<|im_end|>\n", "<|im_start|>user\n",
                                 task.turns[t].question, "<|im_end|>\n<|im_start|>assistant\n"));
}

absl::StatusOr<std::vector<Arm>> ArmsFor(const std::vector<std::string>& methods,
                                         const EvictionProfile& profile) {
  std::vector<Arm> arms;
  for (const std::string& method : methods) {
    Arm arm{.label = method, .laq = method == "laq"};
    absl::StatusOr<MethodSettings> settings = profile.For(arm.laq ? "snapkv" : method);
    if (!settings.ok()) {
      return absl::NotFoundError(absl::StrCat(settings.status().message(), ", laq"));
    }
    arm.settings = *std::move(settings);
    arms.push_back(std::move(arm));
  }
  return arms;
}

namespace {

// Everything ValidateRunOptions checks but the scorers, which RunTask builds anyway.
absl::Status CheckArmsAndBudgets(const RunOptions& options) {
  if (options.arms.empty()) return absl::InvalidArgumentError("no methods to evaluate");
  if (options.budgets.empty()) return absl::InvalidArgumentError("no budgets to evaluate");
  for (const Arm& arm : options.arms) {
    if (arm.settings.schedule == Schedule::kCake && arm.settings.scorer.method != "cake") {
      return absl::InvalidArgumentError(absl::StrCat(arm.label, ": schedule cake needs cake"));
    }
  }
  for (double b : options.budgets) {
    if (!(b > 0.0 && b <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat("budget ", b, " is outside (0, 1]"));
    }
  }
  if (options.max_answer_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_answer_tokens must be >= 1, got ", options.max_answer_tokens));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRunOptions(const RunOptions& options) {
  RETURN_IF_ERROR(CheckArmsAndBudgets(options));
  MultiScorer multi(/*n_layers=*/1);  // builds each distinct scorer once, as RunTask does
  for (const Arm& arm : options.arms) {
    ASSIGN_OR_RETURN(const ScorerConfig config, ConfigOf(arm, options));
    RETURN_IF_ERROR(multi.Add(config).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskScores> RunTask(const model::Model& model, kernels::ThreadPool& pool,
                                   const Task& task, const RunOptions& options,
                                   const std::function<void()>& on_run) {
  // The scorers are built (and their errors returned) once below, not also to validate: a tuning
  // run has dozens of arms, and learned methods load their weights.
  RETURN_IF_ERROR(CheckArmsAndBudgets(options));
  MultiScorer multi(model.config().n_layers);
  std::vector<size_t> member;  // [arm] its scorer's index in `multi`
  for (const Arm& arm : options.arms) {
    ASSIGN_OR_RETURN(const ScorerConfig config, ConfigOf(arm, options));
    ASSIGN_OR_RETURN(const size_t i, multi.Add(config));
    member.push_back(i);
  }
  const model::Tokenizer& tok = model.tokenizer();
  const std::vector<int32_t> prompt = EvictedPrompt(tok, task);
  TaskScores out;
  out.kind = task.kind;
  out.seed = task.seed;
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  ASSIGN_OR_RETURN(const Script script,
                   PlainPrefill(model, pool, prompt, task, options, out.prefill_seconds));
  out.evicted_prompt = prompt;
  out.fed_before_answer.assign(script.tokens.begin(),
                               script.tokens.begin() + script.answer_begin.back());

  model::Sequence session(model, pool);
  const SelectionOptions keep_all{.budget_ratio = 1.0, .sinks = 0, .window = 0};
  ASSIGN_OR_RETURN(EvictionResult prefill, PrefillAndEvict(session, prompt, multi, keep_all));
  out.capture_prefill_seconds = prefill.prefill_seconds;
  const std::vector<model::KvHead> full = Snapshot(session.cache());
  ContinuationScores full_raw;
  Answers seen;
  ASSIGN_OR_RETURN(out.full, ScoreCache(session, task, script, nullptr, options, seen, &full_raw));
  out.full.method = "full";
  if (on_run) on_run();

  const std::vector<int32_t> header = TurnRows(tok, task, 0, false);
  for (size_t a = 0; a < options.arms.size(); ++a) {
    const Arm& arm = options.arms[a];
    const size_t i = member[a];
    const double lookahead_seconds =
        multi.member(i).lookahead_module() != nullptr ? prefill.lookahead_seconds : 0.0;
    for (double budget : options.budgets) {
      const Clock::time_point start = Clock::now();
      const SelectionOptions selection =
          SelectionFor(arm.settings, multi.member(i).window(), budget, out.prompt_tokens);
      auto select = [&](const std::vector<std::vector<float>>& scores) {
        absl::StatusOr<KeptEntries> kept = Select(
            scores, out.prompt_tokens, session.cache().n_kv_heads(), selection,
            selection.schedule == Schedule::kCake ? multi.preferences(i) : std::vector<double>());
        if (kept.ok()) return kept;
        return absl::StatusOr<KeptEntries>(absl::InvalidArgumentError(
            absl::StrCat(arm.label, " at budget ", budget, " on a ", out.prompt_tokens,
                         "-token prompt: ", kept.status().message())));
      };
      ASSIGN_OR_RETURN(KeptEntries kept, select(multi.scores(i)));
      if (arm.laq) {
        ASSIGN_OR_RETURN(
            const std::vector<std::vector<float>> rescored,
            LaqScores(session, full, kept, header,
                      {.draft_tokens = options.laq_draft_tokens,
                       .kernel = arm.settings.scorer.kernel > 0 ? arm.settings.scorer.kernel : 5}));
        ASSIGN_OR_RETURN(kept, select(rescored));
      }
      RETURN_IF_ERROR(SetCache(session, full, &kept));
      const double select_seconds = SecondsSince(start);
      ASSIGN_OR_RETURN(RunScores run,
                       ScoreCache(session, task, script, &full_raw.log_probs, options, seen));
      run.method = arm.label;
      run.budget = budget;
      run.scoring_seconds = multi.seconds(i) + lookahead_seconds + select_seconds;
      out.runs.push_back(std::move(run));
      if (on_run) on_run();
    }
  }
  RETURN_IF_ERROR(SetCache(session, full, nullptr));
  return out;
}

}  // namespace glimpse::eviction::eval
