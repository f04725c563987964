// `glimpse eval --cluster`: the quality suite served by a local cluster (local_cluster.h) beside
// the in-process results of the same tasks, arms and budgets (core/eviction/eval/runner.h).
//
// Each (task, arm, budget) is one session through the frontend: the prompt (the chat template
// through the assistant header) goes to the prefill worker, which prefills and evicts all of it but
// the last token with the arm's method at the budget (settings from the workers' eviction profile,
// the same file as in process), stores both tiers and ships the kept pages over UCX in fp16; the
// decode worker feeds the last token and answers greedily. The session ends afterwards. A
// two-turn task sends turn 2 with the full cache's turn-1 answer as history, as in process; the
// decode worker then starts from turn 1's stored state and evicts again over turn 2's new tokens,
// where the in-process run answers over turn 1's evicted cache. Methods must be policy methods
// (no laq).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/eviction/eval/runner.h"
#include "core/model/tokenizer.h"
#include "tools/cli/local_cluster.h"

namespace glimpse::cli {

struct ClusterRun {
  std::string method;  // the arm's label, "full" for no eviction
  double budget = 1.0;
  bool correct = false;
  bool same = false;  // the answer text equals the in-process run's
  std::string answer;
};

class ClusterEval {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterEval>> Start(const LocalClusterOptions& options);
  ~ClusterEval();

  // The full cache and every arm × budget of `in_process` (RunTask's scores of `task`), served.
  absl::StatusOr<std::vector<ClusterRun>> Serve(const model::Tokenizer& tok,
                                                const eviction::eval::Task& task,
                                                const eviction::eval::TaskScores& in_process,
                                                const eviction::eval::RunOptions& options,
                                                int64_t task_index);

 private:
  struct Impl;
  explicit ClusterEval(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// | method | budget | accuracy (in process) | accuracy (cluster) | same answer | over every task.
std::string ClusterTable(const std::vector<std::vector<ClusterRun>>& runs);

}  // namespace glimpse::cli
