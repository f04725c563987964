// Aggregates per-task scores of the quality suite into one row per (method, budget) and renders
// them as a markdown table and as JSON (which tools/plot_eval.py reads for the PNG).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/eviction/eval/runner.h"
#include "nlohmann/json.hpp"

namespace glimpse::eviction::eval {

struct ReportRow {
  std::string method;  // "full" first
  double budget = 1.0;
  int64_t tasks = 0;
  double accuracy = 0.0;  // fraction of tasks answered correctly
  // Of the tasks the full cache answers, the fraction this row answers too: what eviction keeps.
  double retained = 0.0;
  std::map<std::string, double> by_kind;  // accuracy per TaskKindName
  double agreement = 0.0;                 // mean greedy-token agreement with the full cache
  double kl = 0.0;                        // mean teacher-forced KL(full ‖ evicted), nats
  double overhead_pct =
      0.0;  // Σ scoring seconds (summed over layers) / Σ plain prefill seconds · 100 (0 for full)
};

// Rows: the full cache, then each arm in `options` order with its budgets in order.
std::vector<ReportRow> Aggregate(const std::vector<TaskScores>& tasks, const RunOptions& options);

std::string MarkdownTable(const std::vector<ReportRow>& rows);

nlohmann::json ReportJson(const std::vector<ReportRow>& rows, const std::vector<TaskScores>& tasks);

}  // namespace glimpse::eviction::eval
