#include "core/eviction/eval/runner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
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

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// PyramidKV is SnapKV's scores under the pyramid schedule (as `glimpse evict` treats it); LAQ's
// first stage is SnapKV.
std::string ScorerName(const std::string& method) {
  return method == "pyramidkv" || method == "laq" ? "snapkv" : method;
}

ScorerConfig ConfigFor(const std::string& name, const RunOptions& options) {
  ScorerConfig config;
  config.method = name;
  if (name == "lookahead") config.module_path = options.lookahead_module;
  return config;
}

// A scorer holding several: needs and window are the union / maximum of its members', Score()
// runs and times every member and records its scores; it reports zeros (the prefill keeps all).
// The pipeline scores layers concurrently, so every (member, layer) has its own slots, sized up
// front: Score() writes only its layer's.
class MultiScorer : public Scorer {
 public:
  explicit MultiScorer(int32_t n_layers) : n_layers_(n_layers) {}

  absl::Status Add(const std::string& name, const RunOptions& options) {
    ScorerConfig config = ConfigFor(name, options);
    ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, CreateScorer(config));
    if (scorer->window() > 0) {  // window scorers observe the selection's recent window
      config.window = options.window;
      ASSIGN_OR_RETURN(scorer, CreateScorer(config));
    }
    index_[name] = members_.size();
    members_.push_back(std::move(scorer));
    scores_.emplace_back(n_layers_);
    seconds_.emplace_back(n_layers_, 0.0);
    extra_seconds_.push_back(0.0);
    return absl::OkStatus();
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
      RETURN_IF_ERROR(members_[i]->Score(view, layer.data()));
      seconds_[i][view.layer] = SecondsSince(start);
    }
    std::fill(scores, scores + n, 0.0f);
    return absl::OkStatus();
  }

  bool Has(const std::string& name) const { return index_.count(name) > 0; }
  size_t index(const std::string& name) const { return index_.at(name); }
  const std::vector<std::vector<float>>& scores(size_t i) const { return scores_[i]; }
  // Scoring time summed over layers (CPU seconds when layers ran in parallel), plus any
  // AddSeconds.
  double seconds(size_t i) const {
    return extra_seconds_[i] + std::accumulate(seconds_[i].begin(), seconds_[i].end(), 0.0);
  }
  // Time a member cost outside Score(), e.g. LookaheadKV's second pass.
  void AddSeconds(size_t i, double seconds) { extra_seconds_[i] += seconds; }

 private:
  const int32_t n_layers_;
  std::vector<std::unique_ptr<Scorer>> members_;
  std::map<std::string, size_t> index_;
  mutable std::vector<std::vector<std::vector<float>>> scores_;  // [member][layer][Hkv · T]
  mutable std::vector<std::vector<double>> seconds_;             // [member][layer]
  std::vector<double> extra_seconds_;                            // [member]
};

// Answers of earlier runs of a task, per turn (drafts for the next runs' decoding).
using Answers = std::vector<std::vector<std::vector<int32_t>>>;

// The full cache's greedy answers, turn by turn, as the reference script: incremental decode in
// `session`, which holds the plain prefill of the prompt (and keeps what it decodes).
absl::StatusOr<Script> ReferenceScript(model::Session& session, const Task& task,
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
absl::StatusOr<RunScores> ScoreCache(model::Session& session, const Task& task,
                                     const Script& script,
                                     const std::vector<std::vector<double>>* full_log_probs,
                                     int32_t max_tokens, Answers& seen,
                                     ContinuationScores* raw = nullptr) {
  ASSIGN_OR_RETURN(ContinuationScores c, ScoreContinuation(session, script, max_tokens, seen));
  seen.resize(c.answers.size());
  for (size_t t = 0; t < c.answers.size(); ++t) seen[t].push_back(c.answers[t]);
  RunScores run;
  const std::span<const int32_t> all(script.tokens);
  for (size_t t = 0; t < c.answers.size(); ++t) {
    const int64_t begin = script.answer_begin[t];
    run.agreement +=
        GreedyAgreement(c.answers[t], all.subspan(begin, script.answer_end[t] - begin), max_tokens);
  }
  run.agreement /= static_cast<double>(std::max<size_t>(c.answers.size(), 1));
  std::vector<int32_t> last = c.answers.back();
  if (!last.empty() && session.model().tokenizer().IsEndOfGeneration(last.back())) last.pop_back();
  ASSIGN_OR_RETURN(run.answer, session.model().tokenizer().Decode(last));
  run.correct = AnswerMatches(run.answer, task.turns.back().answer);
  const std::vector<std::vector<double>>& reference =
      full_log_probs != nullptr ? *full_log_probs : c.log_probs;
  for (size_t r = 0; r < c.log_probs.size(); ++r) {
    run.kl += KlDivergence(reference[r], c.log_probs[r]);
  }
  run.kl /= static_cast<double>(std::max<size_t>(c.log_probs.size(), 1));
  if (raw != nullptr) *raw = std::move(c);
  return run;
}

// The selection a run uses: the pipeline's sinks and recent window, per head, uniform (pyramid
// for PyramidKV).
SelectionOptions Selection(const RunOptions& options, const std::string& method, double budget) {
  SelectionOptions selection;
  selection.budget_ratio = budget;
  selection.sinks = options.sinks;
  selection.window = options.window;
  if (method == "pyramidkv") selection.schedule = Schedule::kPyramid;
  return selection;
}

// The plain prefill (timed: the denominator of the scoring overhead) and, continuing it, the full
// cache's reference answers, in a session of their own.
absl::StatusOr<Script> PlainPrefill(const model::Model& model, kernels::ThreadPool& pool,
                                    std::span<const int32_t> prompt, const Task& task,
                                    const RunOptions& options, double& seconds) {
  model::Session plain(model, pool);
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(plain.Forward(prompt).status());
  seconds = SecondsSince(start);
  return ReferenceScript(plain, task, options.max_answer_tokens);
}

}  // namespace

std::vector<int32_t> TurnRows(const model::Tokenizer& tok, const Task& task, size_t t,
                              bool previous_ended) {
  if (t == 0) return tok.Encode("<|im_start|>assistant\n");
  return tok.Encode(absl::StrCat(previous_ended ? "\n" : "<|im_end|>\n", "<|im_start|>user\n",
                                 task.turns[t].question, "<|im_end|>\n<|im_start|>assistant\n"));
}

absl::Status ValidateRunOptions(const RunOptions& options) {
  if (options.methods.empty()) return absl::InvalidArgumentError("no methods to evaluate");
  if (options.budgets.empty()) return absl::InvalidArgumentError("no budgets to evaluate");
  for (const std::string& method : options.methods) {
    RETURN_IF_ERROR(CreateScorer(ConfigFor(ScorerName(method), options)).status());
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

absl::StatusOr<TaskScores> RunTask(const model::Model& model, kernels::ThreadPool& pool,
                                   const Task& task, const RunOptions& options,
                                   const std::function<void()>& on_run) {
  RETURN_IF_ERROR(ValidateRunOptions(options));
  MultiScorer multi(model.config().n_layers);
  for (const std::string& method : options.methods) {
    if (!multi.Has(ScorerName(method))) {
      RETURN_IF_ERROR(multi.Add(ScorerName(method), options));
    }
  }
  const model::Tokenizer& tok = model.tokenizer();
  const std::vector<int32_t> prompt =
      tok.Encode(tok.ApplyChatTemplate({{"user", FirstUserMessage(task)}}, false));
  TaskScores out;
  out.kind = task.kind;
  out.seed = task.seed;
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  ASSIGN_OR_RETURN(const Script script,
                   PlainPrefill(model, pool, prompt, task, options, out.prefill_seconds));

  model::Session session(model, pool);
  const SelectionOptions keep_all = Selection(options, "", 1.0);
  ASSIGN_OR_RETURN(EvictionResult prefill, PrefillAndEvict(session, prompt, multi, keep_all));
  out.capture_prefill_seconds = prefill.prefill_seconds;
  if (multi.Has("lookahead")) multi.AddSeconds(multi.index("lookahead"), prefill.lookahead_seconds);
  const std::vector<model::KvHead> full = Snapshot(session.cache());
  ContinuationScores full_raw;
  Answers seen;
  ASSIGN_OR_RETURN(out.full, ScoreCache(session, task, script, nullptr, options.max_answer_tokens,
                                        seen, &full_raw));
  out.full.method = "full";
  if (on_run) on_run();

  const std::vector<int32_t> header = TurnRows(model.tokenizer(), task, 0, false);
  for (const std::string& method : options.methods) {
    const size_t i = multi.index(ScorerName(method));
    for (double budget : options.budgets) {
      const Clock::time_point start = Clock::now();
      const SelectionOptions selection = Selection(options, method, budget);
      auto select = [&](const std::vector<std::vector<float>>& scores) {
        absl::StatusOr<KeptEntries> kept =
            Select(scores, out.prompt_tokens, session.cache().n_kv_heads(), selection);
        if (kept.ok()) return kept;
        return absl::StatusOr<KeptEntries>(absl::InvalidArgumentError(
            absl::StrCat(method, " at budget ", budget, " on a ", out.prompt_tokens,
                         "-token prompt: ", kept.status().message())));
      };
      ASSIGN_OR_RETURN(KeptEntries kept, select(multi.scores(i)));
      if (method == "laq") {
        ASSIGN_OR_RETURN(
            const std::vector<std::vector<float>> rescored,
            LaqScores(session, full, kept, header, {.draft_tokens = options.laq_draft_tokens}));
        ASSIGN_OR_RETURN(kept, select(rescored));
      }
      SetCache(session, full, &kept);
      const double select_seconds = SecondsSince(start);
      ASSIGN_OR_RETURN(RunScores run, ScoreCache(session, task, script, &full_raw.log_probs,
                                                 options.max_answer_tokens, seen));
      run.method = method;
      run.budget = budget;
      run.scoring_seconds = multi.seconds(i) + select_seconds;
      out.runs.push_back(std::move(run));
      if (on_run) on_run();
    }
  }
  SetCache(session, full, nullptr);
  return out;
}

}  // namespace glimpse::eviction::eval
