#include "core/eviction/eval/tune.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/runner.h"

namespace glimpse::eviction::eval {
namespace {

constexpr int64_t kWindows[] = {8, 16, 32, 64};
constexpr int64_t kKernels[] = {1, 5, 9};
// Never 0: the first entries are the attention sink (StreamingLLM); without them the default model
// answers a 37-token chat prompt with nothing at all (an immediate end of turn), which the
// calibration set's long texts do not show.
constexpr int64_t kSinks[] = {4, 16};
constexpr int64_t kRecentWindows[] = {16, 32, 64};
// A candidate may not trade one budget for another: at none may its KL exceed the incumbent's by
// more than this share.
constexpr double kBudgetTolerance = 0.02;

// Candidates are told apart by what they run: Describe() names every setting that matters (a
// window scorer's recent window does not: its own W replaces it).
void AddDistinct(std::vector<MethodSettings>& out, std::set<std::string>& seen,
                 const MethodSettings& s) {
  if (seen.insert(Describe(s)).second) out.push_back(s);
}

// Mean KL of every arm at every budget over the tasks: [arm][budget].
absl::StatusOr<std::vector<std::vector<double>>> MeanKl(
    const model::Model& model, kernels::ThreadPool& pool, const std::vector<Task>& tasks,
    const std::vector<Arm>& arms, const TuneOptions& options, const std::function<void()>& on_run) {
  RunOptions run{.arms = arms,
                 .budgets = options.budgets,
                 .max_answer_tokens = options.answer_tokens,
                 .lookahead_module = options.lookahead_module,
                 .kl_only = true};
  std::vector<std::vector<double>> kl(arms.size(),
                                      std::vector<double>(options.budgets.size(), 0.0));
  const double n = static_cast<double>(tasks.size());
  for (const Task& task : tasks) {
    ASSIGN_OR_RETURN(const TaskScores scores, RunTask(model, pool, task, run, on_run));
    for (size_t a = 0; a < arms.size(); ++a) {
      for (size_t b = 0; b < options.budgets.size(); ++b) {
        kl[a][b] += scores.runs[a * options.budgets.size() + b].kl / n;
      }
    }
  }
  return kl;
}

// One stage for every method: candidates[m] are method m's; returns their scores, and appends
// them to each method's record.
absl::Status RunStage(const model::Model& model, kernels::ThreadPool& pool,
                      const std::vector<Task>& tasks, const TuneOptions& options,
                      const std::vector<std::vector<MethodSettings>>& candidates,
                      std::vector<MethodTuning>& tuned, const std::function<void()>& on_run) {
  std::vector<Arm> arms;
  for (size_t m = 0; m < candidates.size(); ++m) {
    for (const MethodSettings& s : candidates[m])
      arms.push_back({.label = tuned[m].method, .settings = s});
  }
  ASSIGN_OR_RETURN(const std::vector<std::vector<double>> kl,
                   MeanKl(model, pool, tasks, arms, options, on_run));
  size_t a = 0;
  for (size_t m = 0; m < candidates.size(); ++m) {
    for (const MethodSettings& s : candidates[m]) {
      const std::vector<double>& per_budget = kl[a++];
      double mean = 0.0;
      for (double k : per_budget) mean += k / static_cast<double>(per_budget.size());
      tuned[m].candidates.push_back({s, mean, per_budget});
    }
  }
  return absl::OkStatus();
}

// Whether `c` is within kBudgetTolerance of `incumbent` at every budget.
bool NoWorseAtAnyBudget(const CandidateScore& c, const CandidateScore& incumbent) {
  for (size_t b = 0; b < c.kl_by_budget.size(); ++b) {
    if (c.kl_by_budget[b] > incumbent.kl_by_budget[b] * (1.0 + kBudgetTolerance)) return false;
  }
  return true;
}

// The best of method m's last `count` candidates: the lowest mean among those no worse than the
// first (the incumbent) at any budget; the first on ties.
const CandidateScore& Best(const MethodTuning& t, size_t count) {
  const CandidateScore& incumbent = t.candidates[t.candidates.size() - count];
  const CandidateScore* best = &incumbent;
  for (size_t i = t.candidates.size() - count; i < t.candidates.size(); ++i) {
    const CandidateScore& c = t.candidates[i];
    if (c.kl < best->kl && NoWorseAtAnyBudget(c, incumbent)) best = &c;
  }
  return *best;
}

}  // namespace

std::vector<MethodSettings> ScorerCandidates(const std::string& method,
                                             const MethodSettings& built_in) {
  std::vector<MethodSettings> out;
  std::set<std::string> seen;
  AddDistinct(out, seen, built_in);
  const absl::StatusOr<WindowDefaults> defaults = ScorerWindowDefaults(built_in.scorer.method);
  if (!defaults.ok() || defaults->kernel == 0) return out;  // neither a window nor pooling
  // Max pooling where its method is defined with it or has no window to be defined by (pooled
  // scorers, pooled_scorer.cc); DefensiveKV and CAKE are defined with avg.
  const bool max_too = built_in.scorer.method == "snapkv" || built_in.scorer.window == 0;
  std::vector<int64_t> windows(std::begin(kWindows), std::end(kWindows));
  if (built_in.scorer.window == 0) {
    // Windowless: pooling only, or (LookaheadKV) pooling with and without a window beside it.
    if (defaults->window_optional) {
      windows.insert(windows.begin(), 0);
    } else {
      windows = {0};
    }
  }
  for (int64_t w : windows) {
    for (int64_t k : kKernels) {
      if (w == 0 && k == 1) continue;  // unpooled: the built-in (kernel 0) already
      for (const char* pooling : {"avg", "max"}) {
        // Kernel 1 pools nothing: its max is its avg.
        if ((!max_too || k == 1) && std::string_view(pooling) == "max") continue;
        MethodSettings s = built_in;
        s.scorer.window = w;
        s.scorer.kernel = k;
        s.scorer.pooling = pooling;
        AddDistinct(out, seen, s);
      }
    }
  }
  return out;
}

std::vector<MethodSettings> SelectionCandidates(const std::string& method,
                                                const MethodSettings& winner) {
  std::vector<MethodSettings> out;
  std::set<std::string> seen;
  AddDistinct(out, seen, winner);
  std::vector<int64_t> recent(std::begin(kRecentWindows), std::end(kRecentWindows));
  if (winner.scorer.window > 0) recent = {winner.recent_window};
  std::vector<Schedule> schedules = {Schedule::kUniform, Schedule::kPyramid};
  if (method == "pyramidkv" || winner.schedule == Schedule::kCake) schedules = {winner.schedule};
  for (int64_t sinks : kSinks) {
    for (int64_t window : recent) {
      for (Granularity g : {Granularity::kPerHead, Granularity::kPerLayer}) {
        for (Schedule schedule : schedules) {
          MethodSettings s = winner;
          s.sinks = sinks;
          s.recent_window = window;
          s.granularity = g;
          s.schedule = schedule;
          AddDistinct(out, seen, s);
        }
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<MethodTuning>> Tune(
    const model::Model& model, kernels::ThreadPool& pool, const std::vector<Task>& tasks,
    const TuneOptions& options, const std::function<void(int64_t, int64_t)>& progress) {
  if (tasks.empty()) return absl::InvalidArgumentError("tune needs calibration tasks");
  std::vector<MethodTuning> tuned;
  std::vector<std::vector<MethodSettings>> stage1;
  int64_t total = 0, done = 0;
  const int64_t per_arm = static_cast<int64_t>(options.budgets.size() * tasks.size());
  for (const std::string& method : options.methods) {
    MethodTuning t{.method = method};
    ASSIGN_OR_RETURN(t.built_in, BuiltInSettings(method));
    stage1.push_back(ScorerCandidates(method, t.built_in));
    total += per_arm * static_cast<int64_t>(stage1.back().size() +
                                            SelectionCandidates(method, t.built_in).size());
    tuned.push_back(std::move(t));
  }
  total += 2 * static_cast<int64_t>(tasks.size());  // each stage's full-cache run per task
  auto on_run = [&] {
    if (progress) progress(++done, total);
  };
  RETURN_IF_ERROR(RunStage(model, pool, tasks, options, stage1, tuned, on_run));
  std::vector<std::vector<MethodSettings>> stage2;
  for (size_t m = 0; m < tuned.size(); ++m) {
    tuned[m].built_in_kl = tuned[m].candidates.front().kl;
    stage2.push_back(
        SelectionCandidates(tuned[m].method, Best(tuned[m], stage1[m].size()).settings));
  }
  RETURN_IF_ERROR(RunStage(model, pool, tasks, options, stage2, tuned, on_run));
  for (size_t m = 0; m < tuned.size(); ++m) {
    const CandidateScore& best = Best(tuned[m], stage2[m].size());
    tuned[m].tuned = best.settings;
    tuned[m].tuned_kl = best.kl;
  }
  if (progress) progress(total, total);
  return tuned;
}

EvictionProfile ProfileOf(const std::vector<MethodTuning>& tuned,
                          const std::string& model_fingerprint) {
  EvictionProfile profile;
  profile.set_model_fingerprint(model_fingerprint);
  for (const MethodTuning& t : tuned) profile.Set(t.method, t.tuned);
  return profile;
}

std::string TuneTable(const std::vector<MethodTuning>& tuned) {
  std::string out =
      "| method | built-in settings | KL | tuned settings | KL | change |\n"
      "|---|---|---:|---|---:|---:|\n";
  for (const MethodTuning& t : tuned) {
    absl::StrAppendFormat(&out, "| %s | %s | %.4f | %s | %.4f | %+.1f %% |\n", t.method,
                          Describe(t.built_in), t.built_in_kl, Describe(t.tuned), t.tuned_kl,
                          t.built_in_kl > 0 ? 100.0 * (t.tuned_kl / t.built_in_kl - 1.0) : 0.0);
  }
  return out;
}

}  // namespace glimpse::eviction::eval
