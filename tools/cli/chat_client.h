// A multi-turn chat against a Glimpse frontend (proto/glimpse/v1/frontend.proto): each user line
// is a turn of one session, sent as the whole conversation so far; the answer streams to `out`,
// then one line of turn figures (where the KV came from, TTFT, tokens/s, KV bytes stored vs the
// unevicted fp16 KV, the lease). A line "/tool NAME SECONDS" is an agent's tool call after the
// previous turn: the client waits that long and reports it (the coordinator learns tool
// durations). Used by `glimpse chat` and `glimpse up --chat`.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/common/grpc/server.h"

namespace glimpse::cli {

struct ChatOptions {
  std::string frontend;  // host:port
  TlsFiles tls;
  std::string token;  // bearer token ("" = none)
  std::string session_id;
  int max_tokens = 64;
  std::string policy_method;  // "" = the frontend's default
  double budget_ratio = 0.0;
  std::string codec;
  int32_t decode_budget_tokens = 0;  // decode-time eviction, with policy_method
  bool interactive = false;          // a person types: answer each line as it comes
};

// Reads turns from `in` until EOF; the first failing turn ends the chat with its status.
absl::Status RunChat(const ChatOptions& options, std::istream& in, std::ostream& out);

}  // namespace glimpse::cli
