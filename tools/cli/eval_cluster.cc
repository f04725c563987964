#include "tools/cli/eval_cluster.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/grpc/server.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/metrics.h"
#include "glimpse/v1/frontend.grpc.pb.h"

namespace glimpse::cli {

struct ClusterEval::Impl {
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<v1::Frontend::Stub> stub;

  // One turn of `session`; the streamed answer text.
  absl::StatusOr<std::string> Turn(const std::string& session, const std::vector<int32_t>& tokens,
                                   const std::string& method, double budget, int32_t max_tokens) {
    v1::GenerateRequest req;
    req.set_session_id(session);
    for (int32_t t : tokens) req.mutable_tokens()->add_ids(t);
    req.mutable_policy()->set_method(method == "full" ? "none" : method);
    req.mutable_policy()->set_budget_ratio(method == "full" ? 0.0 : budget);
    req.mutable_policy()->set_codec("fp16");
    req.mutable_sampling()->set_max_tokens(max_tokens);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    auto reader = stub->Generate(&ctx, req);
    std::string text;
    v1::GenerateEvent e;
    while (reader->Read(&e)) text += e.tokens().text();
    const grpc::Status status = reader->Finish();
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("session ", session, ": ", status.error_message()));
    }
    return text;
  }

  void End(const std::string& session) {
    grpc::ClientContext ctx;
    v1::EndSessionRequest req;
    req.set_session_id(session);
    v1::EndSessionResponse resp;
    stub->EndSession(&ctx, req, &resp);  // best effort: only frees the hot copy early
  }
};

ClusterEval::ClusterEval(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterEval::~ClusterEval() = default;

absl::StatusOr<std::unique_ptr<ClusterEval>> ClusterEval::Start(
    const LocalClusterOptions& options) {
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(impl->cluster, LocalCluster::Start(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   ClientChannel(impl->cluster->frontend_address(), {}));
  impl->stub = v1::Frontend::NewStub(channel);
  return std::unique_ptr<ClusterEval>(new ClusterEval(std::move(impl)));
}

absl::StatusOr<std::vector<ClusterRun>> ClusterEval::Serve(
    const model::Tokenizer& tok, const eviction::eval::Task& task,
    const eviction::eval::TaskScores& in_process, const eviction::eval::RunOptions& options,
    int64_t task_index) {
  std::vector<std::pair<const eviction::eval::RunScores*, std::string>> runs = {
      {&in_process.full, "full"}};
  for (const eviction::eval::RunScores& r : in_process.runs) runs.push_back({&r, r.method});
  // Turn 2's history: the full cache's turn-1 answer, as the in-process run feeds it.
  std::string first_answer;
  std::vector<ClusterRun> out;
  for (const auto& [scores, method] : runs) {
    const std::string session =
        absl::StrCat("eval-", task_index, "-", method, "-", static_cast<int>(100 * scores->budget));
    std::vector<model::ChatTurn> chat = {{"user", eviction::eval::FirstUserMessage(task)}};
    std::string answer;
    for (size_t t = 0; t < task.turns.size(); ++t) {
      if (t > 0) {
        chat.push_back({"assistant", first_answer});
        chat.push_back({"user", task.turns[t].question});
      }
      ASSIGN_OR_RETURN(answer, impl_->Turn(session, tok.Encode(tok.ApplyChatTemplate(chat, true)),
                                           method, scores->budget, options.max_answer_tokens));
      if (method == "full" && t == 0) first_answer = answer;
    }
    impl_->End(session);
    out.push_back({.method = method,
                   .budget = method == "full" ? 1.0 : scores->budget,
                   .correct = eviction::eval::AnswerMatches(answer, task.turns.back().answer),
                   .same = answer == scores->answer,
                   .answer = answer});
  }
  return out;
}

std::string ClusterTable(const std::vector<std::vector<ClusterRun>>& tasks) {
  struct Sum {
    int n = 0, correct = 0, same = 0;
  };
  std::vector<std::pair<std::string, double>> order;
  std::map<std::pair<std::string, double>, Sum> sums;
  for (const std::vector<ClusterRun>& runs : tasks) {
    for (const ClusterRun& r : runs) {
      const auto key = std::make_pair(r.method, r.budget);
      if (!sums.count(key)) order.push_back(key);
      Sum& s = sums[key];
      ++s.n;
      s.correct += r.correct;
      s.same += r.same;
    }
  }
  std::string out =
      "| method | budget | accuracy (cluster) | answers equal to in process |\n"
      "|---|---:|---:|---:|\n";
  for (const auto& key : order) {
    const Sum& s = sums[key];
    absl::StrAppendFormat(
        &out, "| %s | %s | %.0f %% | %d / %d |\n", key.first,
        key.first == "full" ? "100 %" : absl::StrFormat("%.0f %%", 100 * key.second),
        100.0 * s.correct / std::max(s.n, 1), s.same, s.n);
  }
  return out;
}

}  // namespace glimpse::cli
