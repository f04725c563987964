#include "core/eviction/eval/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace glimpse::eviction::eval {
namespace {

// Accumulates one row's runs.
struct Sum {
  int64_t n = 0, correct = 0, full_correct = 0, both_correct = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> kind;  // name → (correct, n)
  double agreement = 0.0, kl = 0.0, scoring = 0.0, prefill = 0.0;

  void Add(const TaskScores& task, const RunScores& run) {
    ++n;
    correct += run.correct;
    full_correct += task.full.correct;
    both_correct += task.full.correct && run.correct;
    auto& [k_correct, k_n] = kind[std::string(TaskKindName(task.kind))];
    k_correct += run.correct;
    ++k_n;
    agreement += run.agreement;
    kl += run.kl;
    scoring += run.scoring_seconds;
    prefill += task.prefill_seconds;
  }

  ReportRow Row(const std::string& method, double budget) const {
    ReportRow row;
    row.method = method;
    row.budget = budget;
    row.tasks = n;
    if (n == 0) return row;
    row.accuracy = static_cast<double>(correct) / n;
    row.retained = full_correct > 0 ? static_cast<double>(both_correct) / full_correct : 0.0;
    for (const auto& [name, c] : kind) row.by_kind[name] = static_cast<double>(c.first) / c.second;
    row.agreement = agreement / n;
    row.kl = kl / n;
    row.overhead_pct = prefill > 0.0 ? 100.0 * scoring / prefill : 0.0;
    return row;
  }
};

}  // namespace

std::vector<ReportRow> Aggregate(const std::vector<TaskScores>& tasks, const RunOptions& options) {
  Sum full;
  std::vector<Sum> sums(options.arms.size() * options.budgets.size());
  for (const TaskScores& task : tasks) {
    full.Add(task, task.full);
    for (size_t i = 0; i < task.runs.size() && i < sums.size(); ++i)
      sums[i].Add(task, task.runs[i]);
  }
  std::vector<ReportRow> rows = {full.Row("full", 1.0)};
  for (size_t m = 0; m < options.arms.size(); ++m) {
    for (size_t b = 0; b < options.budgets.size(); ++b) {
      rows.push_back(
          sums[m * options.budgets.size() + b].Row(options.arms[m].label, options.budgets[b]));
    }
  }
  return rows;
}

std::string MarkdownTable(const std::vector<ReportRow>& rows) {
  if (rows.empty()) return "";
  std::string out = "| method | budget | accuracy | retained |";
  std::string rule = "|---|---:|---:|---:|";
  for (const auto& [kind, unused] : rows.front().by_kind) {
    absl::StrAppend(&out, " ", kind, " |");
    rule += "---:|";
  }
  absl::StrAppend(&out, " agreement | KL (nats) | scoring overhead |\n", rule, "---:|---:|---:|\n");
  for (const ReportRow& r : rows) {
    absl::StrAppendFormat(&out, "| %s | %s | %.0f %% | %.0f %% |", r.method,
                          r.method == "full" ? "100 %" : absl::StrFormat("%.0f %%", 100 * r.budget),
                          100 * r.accuracy, 100 * r.retained);
    for (const auto& [kind, accuracy] : r.by_kind) {
      absl::StrAppendFormat(&out, " %.0f %% |", 100 * accuracy);
    }
    absl::StrAppendFormat(&out, " %.3f | %.4f | %s |\n", r.agreement, r.kl,
                          r.method == "full" ? "—" : absl::StrFormat("%.2f %%", r.overhead_pct));
  }
  return out;
}

nlohmann::json ReportJson(const std::vector<ReportRow>& rows,
                          const std::vector<TaskScores>& tasks) {
  nlohmann::json j_rows = nlohmann::json::array();
  for (const ReportRow& r : rows) {
    j_rows.push_back({{"method", r.method},
                      {"budget", r.budget},
                      {"tasks", r.tasks},
                      {"accuracy", r.accuracy},
                      {"retained", r.retained},
                      {"accuracy_by_kind", r.by_kind},
                      {"agreement", r.agreement},
                      {"kl", r.kl},
                      {"overhead_pct", r.overhead_pct}});
  }
  nlohmann::json j_tasks = nlohmann::json::array();
  auto run_json = [](const RunScores& r) {
    return nlohmann::json{{"method", r.method},
                          {"budget", r.budget},
                          {"correct", r.correct},
                          {"answer", r.answer},
                          {"agreement", r.agreement},
                          {"kl", r.kl},
                          {"scoring_seconds", r.scoring_seconds}};
  };
  for (const TaskScores& t : tasks) {
    nlohmann::json runs = nlohmann::json::array();
    for (const RunScores& r : t.runs) runs.push_back(run_json(r));
    j_tasks.push_back({{"kind", std::string(TaskKindName(t.kind))},
                       {"seed", t.seed},
                       {"prompt_tokens", t.prompt_tokens},
                       {"prefill_seconds", t.prefill_seconds},
                       {"capture_prefill_seconds", t.capture_prefill_seconds},
                       {"full", run_json(t.full)},
                       {"runs", std::move(runs)}});
  }
  return {{"rows", std::move(j_rows)}, {"tasks", std::move(j_tasks)}};
}

}  // namespace glimpse::eviction::eval
