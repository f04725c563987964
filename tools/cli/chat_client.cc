#include "tools/cli/chat_client.h"

#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/common/grpc/status.h"
#include "core/common/status_macros.h"
#include "glimpse/v1/frontend.grpc.pb.h"
#include "proto/names.h"

namespace glimpse::cli {
namespace {

struct ToolCall {
  std::string name;
  double seconds = 0.0;
};

// "/tool NAME SECONDS" → the call; other lines → nullopt.
absl::StatusOr<std::optional<ToolCall>> ParseTool(const std::string& line) {
  if (line.rfind("/tool", 0) != 0) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  ToolCall call;
  if (parts.size() != 3 || !absl::SimpleAtod(parts[2], &call.seconds) || call.seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", line, "\": a tool line is /tool NAME SECONDS"));
  }
  call.name = parts[1];
  return call;
}

std::string Bytes(double b) {
  if (b >= 1 << 20) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.1f KiB", b / 1024);
}

class Chat {
 public:
  Chat(const ChatOptions& o, std::unique_ptr<v1::Frontend::Stub> stub)
      : o_(o), stub_(std::move(stub)) {}

  void AddContext(grpc::ClientContext* ctx) const {
    if (!o_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + o_.token);
  }

  absl::Status Turn(const std::string& user, const std::string& next_tool, std::ostream& out);
  absl::Status Tool(const ToolCall& call, std::ostream& out);

 private:
  const ChatOptions o_;
  std::unique_ptr<v1::Frontend::Stub> stub_;
  v1::Conversation conversation_;
  int turn_ = 0;
};

absl::Status Chat::Turn(const std::string& user, const std::string& next_tool, std::ostream& out) {
  v1::ChatMessage* m = conversation_.add_messages();
  m->set_role("user");
  m->set_content(user);
  v1::GenerateRequest req;
  req.set_session_id(o_.session_id);
  *req.mutable_chat() = conversation_;
  req.mutable_sampling()->set_max_tokens(o_.max_tokens);
  if (!o_.policy_method.empty()) {
    req.mutable_policy()->set_method(o_.policy_method);
    req.mutable_policy()->set_budget_ratio(o_.budget_ratio);
    req.mutable_policy()->set_codec(o_.codec);
    req.mutable_policy()->set_decode_budget_tokens(o_.decode_budget_tokens);
  }
  req.set_tool_name(next_tool);
  grpc::ClientContext ctx;
  AddContext(&ctx);
  const auto t0 = std::chrono::steady_clock::now();
  double ttft = -1.0;
  out << "> " << user << "\n" << std::flush;
  auto reader = stub_->Generate(&ctx, req);
  v1::GenerateEvent e;
  v1::TurnStarted started;
  v1::PrefillResponse prefill;  // set when a prefill worker prefilled the turn
  v1::TurnDone done;
  v1::TurnLease lease;
  std::string answer;
  while (reader->Read(&e)) {
    if (e.has_started()) {
      started = e.started();
      prefill = e.prefill();
    }
    if (e.has_done()) done = e.done();
    if (e.has_lease()) lease = e.lease();
    if (e.has_tokens()) {
      if (ttft < 0) {
        ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      answer += e.tokens().text();
      out << e.tokens().text() << std::flush;
    }
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  m = conversation_.add_messages();
  m->set_role("assistant");
  m->set_content(answer);
  ++turn_;
  std::string source = v1::StateSourceName(started.source());
  int64_t reused = started.reused_tokens(), prefilled = started.prefilled_tokens();
  if (started.source() == v1::STATE_SOURCE_PREFILL_WORKER) {
    source = absl::StrFormat("prefill worker (%s, shipped %s)",
                             v1::StateSourceName(prefill.source()), Bytes(prefill.shipped_bytes()));
    reused = prefill.reused_tokens();
    prefilled += prefill.prefilled_tokens();
  }
  if (started.recall_candidates() > 0) {
    source = absl::StrFormat("%s · recalled %d of %d cold entries", source,
                             started.recalled_entries(), started.recall_candidates());
  }
  const double ratio = done.retained_bytes() > 0
                           ? static_cast<double>(done.full_fp16_bytes()) / done.retained_bytes()
                           : 0.0;
  out << "\n"
      << absl::StrFormat(
             "[turn %d · %s · reused %d, prefilled %d tokens · TTFT %.3f s · %.1f tok/s · hot KV "
             "%s vs %s as fp16 (%.1fx fewer) · stored %s · lease %.1f s]\n",
             turn_, source, reused, prefilled, ttft, done.decode_tokens_per_second(),
             Bytes(done.retained_bytes()), Bytes(done.full_fp16_bytes()), ratio,
             Bytes(done.state_bytes()), lease.ttl_ms() / 1000.0)
      << std::flush;
  return absl::OkStatus();
}

absl::Status Chat::Tool(const ToolCall& call, std::ostream& out) {
  out << absl::StrFormat("(tool %s for %.1f s)\n", call.name, call.seconds) << std::flush;
  std::this_thread::sleep_for(std::chrono::duration<double>(call.seconds));
  grpc::ClientContext ctx;
  AddContext(&ctx);
  v1::ToolCallEndedFrontendRequest req;
  req.set_session_id(o_.session_id);
  req.set_observed_duration_ms(static_cast<int64_t>(call.seconds * 1000));
  v1::ToolCallEndedResponse resp;
  return FromGrpcStatus(stub_->ToolCallEnded(&ctx, req, &resp));
}

}  // namespace

absl::Status RunChat(const ChatOptions& options, std::istream& in, std::ostream& out) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   ClientChannel(options.frontend, options.tls));
  Chat chat(options, v1::Frontend::NewStub(channel));
  // Piped input is read ahead by one line so a turn can name the tool call that follows it; a
  // person typing gets each answer at once (and no tool hints).
  std::vector<std::string> lines;
  auto next_line = [&](std::string* line) {
    while (std::getline(in, *line)) {
      if (!line->empty()) return true;
    }
    return false;
  };
  if (!options.interactive) {
    for (std::string line; next_line(&line);) lines.push_back(line);
  }
  for (size_t i = 0;; ++i) {
    std::string line;
    if (options.interactive) {
      if (!next_line(&line)) break;
    } else {
      if (i >= lines.size()) break;
      line = lines[i];
    }
    ASSIGN_OR_RETURN(std::optional<ToolCall> tool, ParseTool(line));
    if (tool) {
      RETURN_IF_ERROR(chat.Tool(*tool, out));
      continue;
    }
    std::string next_tool;
    if (!options.interactive && i + 1 < lines.size()) {
      ASSIGN_OR_RETURN(std::optional<ToolCall> next, ParseTool(lines[i + 1]));
      if (next) next_tool = next->name;
    }
    RETURN_IF_ERROR(chat.Turn(line, next_tool, out));
  }
  return absl::OkStatus();
}

}  // namespace glimpse::cli
