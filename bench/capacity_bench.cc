// Capacity (issue 22): how many sessions of a ~history_tokens conversation one worker's KV pool
// (kv_memory, 256 MiB by default) keeps hot, per policy. For each policy a session is prefilled
// as a decode worker prefills a recompute turn (worker::PrefillTurn: the eviction profile's
// settings, the policy's hot format in a pool of its own), then copied (KvCache::Clone, new pages
// of the same pool) until the pool refuses a copy: sessions = 1 + copies. Prints bytes per session,
// sessions, and the ratio to the first policy (none/fp16 by default), plus the process's RSS after
// loading the model and with every pool full (the pool's pages are the only memory that grows).
//
// With --answer_tokens N each session then generates N tokens (greedy, fed whatever they are, end
// of generation included) before it is copied: the KV of a session that has answered at length.
// A policy method:ratio:codec:decodeB evicts during that generation, every 32 tokens to B entries
// per head (core/eviction/decode_eviction.h), as a decode worker does with
// EvictionPolicy.decode_budget_tokens = B.
//
// Exit status 1 with a message on any error. Flags: --pool_mib N, --history_tokens N,
// --answer_tokens N, --policies method:ratio:codec[:decodeB],..., --threads N, --json PATH.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/flags.h"
#include "bench/prompt.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/eviction/decode_eviction.h"
#include "core/eviction/profile.h"
#include "core/model/kv_pool.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "core/model/sequence.h"
#include "core/worker/policy.h"
#include "core/worker/turn_steps.h"
#include "kernels/cpu/parallel.h"
#include "nlohmann/json.hpp"

namespace glimpse::bench {
namespace {

using nlohmann::json;

struct Options {
  std::string model;
  int64_t pool_mib = 256;
  int history_tokens = 2048;
  int answer_tokens = 0;
  std::vector<std::string> policies = {
      "none:1:fp16",        "none:1:int8",      "none:1:kivi4",        "snapkv:0.2:int8",
      "lookahead:0.2:int8", "snapkv:0.2:kivi4", "lookahead:0.2:kivi4", "snapkv:0.2:kivi2"};
  int threads = 2;
  std::string json_path = GLIMPSE_BENCH_JSON;
};

constexpr char kUsage[] =
    "usage: glimpse_bench_capacity [--model PATH] [--pool_mib N] [--history_tokens N]\n"
    "         [--answer_tokens N] [--policies method:ratio:codec[:decodeB],...] [--threads N]\n"
    "         [--json PATH]\n";

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  o.model = model::DefaultModelPath();
  const auto take = [&](const std::string& flag, const std::string& value) -> absl::Status {
    if (flag == "--model") {
      o.model = value;
    } else if (flag == "--pool_mib") {
      ASSIGN_OR_RETURN(o.pool_mib, ParsePositive(flag, value));
    } else if (flag == "--history_tokens") {
      ASSIGN_OR_RETURN(const int64_t n, ParsePositive(flag, value));
      o.history_tokens = static_cast<int>(n);
    } else if (flag == "--answer_tokens") {
      ASSIGN_OR_RETURN(const int64_t n, ParsePositive(flag, value));
      o.answer_tokens = static_cast<int>(n);
    } else if (flag == "--policies") {
      o.policies = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (flag == "--threads") {
      ASSIGN_OR_RETURN(const int64_t n, ParsePositive(flag, value));
      o.threads = static_cast<int>(n);
    } else if (flag == "--json") {
      o.json_path = value;
    } else {
      return UnknownFlag(flag, kUsage);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachFlag(argc, argv, kUsage, take));
  return o;
}

// Resident set size of this process, MiB (/proc/self/status VmRSS).
double RssMib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kib = 0;
      std::istringstream(line.substr(6)) >> kib;
      return static_cast<double>(kib) / 1024.0;
    }
  }
  return 0.0;
}

// A ChatML conversation of about `tokens` tokens: bench/prompt.txt repeated as the user's
// message, then a question about it.
absl::StatusOr<std::vector<int32_t>> Conversation(const model::Model& m, int tokens) {
  return RepeatedChatPrompt(m, GLIMPSE_PROMPT_FILE, tokens,
                            "\nWhich system is mentioned first above?");
}

// Feeds `tokens` greedy tokens after the prompt's `logits` (an end of generation too: only the
// count matters), with the policy's decode-time eviction when it has a decode budget.
absl::Status Answer(model::Sequence& session, const worker::Method& method,
                    const worker::Policy& policy, std::vector<float> logits, int tokens) {
  std::unique_ptr<eviction::DecodeEviction> eviction;
  if (policy.decode_budget_tokens > 0) {
    ASSIGN_OR_RETURN(eviction,
                     eviction::DecodeEviction::Create(
                         session.model(), *method.scorer,
                         eviction::DecodeEvictionFor(*method.settings, policy.decode_budget_tokens,
                                                     policy.decode_interval)));
  }
  for (int i = 0; i < tokens; ++i) {
    const int32_t next[] = {
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    ASSIGN_OR_RETURN(logits, session.Forward(next, /*all_logits=*/false, eviction.get()));
    session.cache().Seal();
    if (eviction) RETURN_IF_ERROR(eviction->AfterToken(session));
  }
  return absl::OkStatus();
}

struct Row {
  std::string policy;
  int64_t kept_entries = 0;
  int64_t total_entries = 0;
  int64_t session_bytes = 0;
  int64_t sessions = 0;
};

absl::StatusOr<Row> Measure(const model::Model& m, kernels::ThreadPool& threads,
                            worker::ScorerCache& scorers, const std::vector<int32_t>& prompt,
                            const std::string& spec, int answer_tokens, int64_t pool_bytes,
                            std::vector<std::unique_ptr<model::KvPool>>& pools,
                            std::vector<model::KvCache>& copies) {
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  double ratio = 0;
  int64_t decode_budget = 0;
  if (parts.size() < 3 || parts.size() > 4 || !absl::SimpleAtod(parts[1], &ratio) ||
      (parts.size() == 4 && (parts[3].rfind("decode", 0) != 0 ||
                             !absl::SimpleAtoi(parts[3].substr(6), &decode_budget)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy '", spec, "' is not method:ratio:codec[:decodeB]"));
  }
  const std::string method_name = parts[0] == "none" ? "" : parts[0];
  ASSIGN_OR_RETURN(worker::Policy policy,
                   worker::ParsePolicy(method_name, method_name.empty() ? 1.0 : ratio, parts[2]));
  RETURN_IF_ERROR(worker::SetDecodeEviction(policy, decode_budget, 0));
  worker::Method method;
  if (!method_name.empty()) {
    ASSIGN_OR_RETURN(method, scorers.For(policy));
  }
  const model::ModelConfig& c = m.config();
  pools.push_back(std::make_unique<model::KvPool>(model::KvPool::Options{
      .budget_bytes = pool_bytes, .page_tokens = 64, .head_dim = c.head_dim}));
  model::KvPool& pool = *pools.back();
  model::Sequence session(m, threads, worker::SessionOptionsFor(&pool, policy.codec));
  ASSIGN_OR_RETURN(worker::PolicyPrefill prefill,
                   worker::PrefillTurn(session, prompt, method, policy, worker::PrefillLimits{}));
  RETURN_IF_ERROR(Answer(session, method, policy, std::move(prefill.logits), answer_tokens));
  Row row{.policy = spec,
          .kept_entries = session.cache().TotalEntries(),
          .total_entries = prefill.total_entries +
                           int64_t{m.config().n_layers} * m.config().n_kv_heads * answer_tokens,
          .session_bytes = session.cache().TotalBytes(),
          .sessions = 1};
  while (true) {
    absl::StatusOr<model::KvCache> copy = session.cache().Clone();
    if (!copy.ok()) {
      if (copy.status().code() != absl::StatusCode::kResourceExhausted) return copy.status();
      break;
    }
    copies.push_back(*std::move(copy));
    ++row.sessions;
  }
  return row;
}

absl::Status Run(const Options& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::Model::Load(o.model));
  ASSIGN_OR_RETURN(eviction::EvictionProfile profile,
                   eviction::ResolveProfile("", GLIMPSE_LOOKAHEAD_MODULE, m->fingerprint()));
  worker::ScorerCache scorers(GLIMPSE_LOOKAHEAD_MODULE, profile);
  kernels::ThreadPool threads(o.threads);
  ASSIGN_OR_RETURN(const std::vector<int32_t> prompt, Conversation(*m, o.history_tokens));
  const double rss_model = RssMib();
  const int64_t pool_bytes = o.pool_mib << 20;

  std::vector<std::unique_ptr<model::KvPool>> pools;
  std::vector<model::KvCache> copies;  // destroyed before their pools (declared after)
  std::vector<Row> rows;
  ProgressBar bar("capacity", static_cast<int64_t>(o.policies.size()));
  for (const std::string& spec : o.policies) {
    ASSIGN_OR_RETURN(Row row, Measure(*m, threads, scorers, prompt, spec, o.answer_tokens,
                                      pool_bytes, pools, copies));
    rows.push_back(row);
    bar.Update(static_cast<int64_t>(rows.size()));
  }
  bar.Done();
  const double rss_full = RssMib();

  std::printf(
      "\nSessions of a %zu-token conversation%s hot in a %lld MiB KV pool (page 64 tokens)\n",
      prompt.size(),
      o.answer_tokens > 0 ? absl::StrCat(" and a ", o.answer_tokens, "-token answer").c_str() : "",
      static_cast<long long>(o.pool_mib));
  std::printf(
      "| policy | kept / total entries | bytes per session | sessions | / %s |\n"
      "|---|---|---|---|---|\n",
      rows.front().policy.c_str());
  json out = {{"history_tokens", prompt.size()},
              {"answer_tokens", o.answer_tokens},
              {"pool_mib", o.pool_mib},
              {"rows", json::array()}};
  for (const Row& r : rows) {
    const double ratio = static_cast<double>(r.sessions) / rows.front().sessions;
    std::printf("| %s | %lld / %lld | %lld | %lld | %.2f× |\n", r.policy.c_str(),
                static_cast<long long>(r.kept_entries), static_cast<long long>(r.total_entries),
                static_cast<long long>(r.session_bytes), static_cast<long long>(r.sessions), ratio);
    out["rows"].push_back({{"policy", r.policy},
                           {"kept_entries", r.kept_entries},
                           {"total_entries", r.total_entries},
                           {"session_bytes", r.session_bytes},
                           {"sessions", r.sessions},
                           {"ratio", ratio}});
  }
  std::printf(
      "RSS: %.0f MiB with the model loaded and no session; %.0f MiB with %zu full pools of %lld "
      "MiB (+%.0f MiB per pool)\n",
      rss_model, rss_full, pools.size(), static_cast<long long>(o.pool_mib),
      (rss_full - rss_model) / static_cast<double>(pools.size()));
  out["rss_mib_model"] = rss_model;
  out["rss_mib_full"] = rss_full;
  out["pools"] = pools.size();
  std::ofstream(o.json_path) << out.dump(2) << "\n";
  std::printf("wrote %s\n", o.json_path.c_str());
  copies.clear();
  return absl::OkStatus();
}

}  // namespace
}  // namespace glimpse::bench

int main(int argc, char** argv) {
  return glimpse::bench::BenchMain("glimpse_bench_capacity", argc, argv, glimpse::bench::ParseArgs,
                                   glimpse::bench::Run);
}
