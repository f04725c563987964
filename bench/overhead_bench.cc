// Eviction overhead (issue 21): what scoring, selection and compaction add to a prompt's prefill,
// per method, as a prefill worker runs them (worker::PrefillWithPolicy with the eviction profile's
// settings, fp16 pages) against the same call without a method (a plain prefill that keeps
// everything), in the same process. Each round runs the plain prefill and every method once, in an
// order that rotates from round to round; after one warm-up round, --rounds rounds give a median
// time per arm and, per method, overhead = the median over rounds of method / plain − 1 (paired
// within a round, so a slow spell of a shared machine slows both sides). Unlike the scoring time
// `glimpse evict` and `glimpse eval` report, this counts everything a method adds, capture during
// the prefill included (H2O's accumulated attention, SnapKV's window queries).
//
// Prompts: bench/prompt.txt repeated as a ChatML user message, cut to each --tokens length.
// Prints a table and writes JSON. Exit status 1 with a message on any error. Flags: --tokens
// N,..., --methods m,..., --budget R, --rounds N, --threads N, --json PATH, --module FILE (another
// LookaheadKV module; the settings stay the committed profile's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/flags.h"
#include "bench/prompt.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
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
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::vector<int> tokens = {1024, 2048, 4096};
  std::vector<std::string> methods = {"streamingllm", "snapkv", "h2o", "lookahead"};
  double budget = 0.2;
  int rounds = 5;
  int threads = 2;
  std::string json_path = GLIMPSE_BENCH_JSON;
  std::string module = GLIMPSE_LOOKAHEAD_MODULE;  // settings: the committed module's profile
};

constexpr char kUsage[] =
    "usage: glimpse_bench_overhead [--model PATH] [--module FILE] [--tokens N,...]\n"
    "         [--methods m,...] [--budget R] [--rounds N] [--threads N] [--json PATH]\n";

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  o.model = model::DefaultModelPath();
  const auto take = [&](const std::string& flag, const std::string& value) -> absl::Status {
    if (flag == "--model") {
      o.model = value;
    } else if (flag == "--tokens") {
      o.tokens.clear();
      const std::vector<std::string> lengths = absl::StrSplit(value, ',', absl::SkipEmpty());
      for (const std::string& n : lengths) {
        ASSIGN_OR_RETURN(const int tokens, ParsePositive(flag, n));
        o.tokens.push_back(tokens);
      }
    } else if (flag == "--methods") {
      o.methods = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (flag == "--budget") {
      if (!absl::SimpleAtod(value, &o.budget) || !(o.budget > 0.0 && o.budget <= 1.0)) {
        return absl::InvalidArgumentError(absl::StrCat("--budget wants (0, 1], got '", value, "'"));
      }
    } else if (flag == "--rounds") {
      ASSIGN_OR_RETURN(o.rounds, ParsePositive(flag, value));
    } else if (flag == "--threads") {
      ASSIGN_OR_RETURN(o.threads, ParsePositive(flag, value));
    } else if (flag == "--json") {
      o.json_path = value;
    } else if (flag == "--module") {
      o.module = value;
    } else {
      return UnknownFlag(flag, kUsage);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachFlag(argc, argv, kUsage, take));
  return o;
}

// A ChatML prompt of exactly `tokens` tokens: bench/prompt.txt repeated as the user's message.
absl::StatusOr<std::vector<int32_t>> Prompt(const model::Model& m, int tokens) {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   RepeatedChatPrompt(m, GLIMPSE_PROMPT_FILE, tokens, ""));
  ids.resize(tokens);
  return ids;
}

// One prefill of `prompt` with `policy` (method "" = plain) in a fresh session; its seconds.
absl::StatusOr<double> Prefill(const model::Model& m, kernels::ThreadPool& threads,
                               worker::ScorerCache& scorers, const std::vector<int32_t>& prompt,
                               const worker::Policy& policy) {
  worker::Method method;
  if (!policy.method.empty()) {
    ASSIGN_OR_RETURN(method, scorers.For(policy));
  }
  model::KvPool pool({.page_tokens = 64, .head_dim = m.config().head_dim});
  model::Sequence session(m, threads, worker::SessionOptionsFor(&pool, policy.codec));
  const auto start = Clock::now();
  RETURN_IF_ERROR(
      worker::PrefillWithPolicy(session, prompt, method, policy, worker::PrefillLimits{}).status());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status Run(const Options& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::Model::Load(o.model));
  ASSIGN_OR_RETURN(eviction::EvictionProfile profile,
                   eviction::ResolveProfile("", GLIMPSE_LOOKAHEAD_MODULE, m->fingerprint()));
  worker::ScorerCache scorers(o.module, profile);
  kernels::ThreadPool threads(o.threads);
  std::vector<worker::Policy> arms;  // arms[0] is the plain prefill
  ASSIGN_OR_RETURN(arms.emplace_back(), worker::ParsePolicy("", 1.0, "fp16"));
  for (const std::string& method : o.methods) {
    ASSIGN_OR_RETURN(arms.emplace_back(), worker::ParsePolicy(method, o.budget, "fp16"));
  }
  json out = {{"budget", o.budget}, {"rounds", o.rounds}, {"rows", json::array()}};
  std::string table = "| prompt tokens | plain prefill (ms) |";
  for (const std::string& method : o.methods) absl::StrAppend(&table, " ", method, " (ms) |");
  absl::StrAppend(&table, "\n|---:|---:|");
  for (size_t i = 0; i < o.methods.size(); ++i) absl::StrAppend(&table, "---:|");
  ProgressBar bar("eviction overhead",
                  static_cast<int64_t>(o.tokens.size()) * (o.rounds + 1) * arms.size());
  int64_t done = 0;
  for (int tokens : o.tokens) {
    ASSIGN_OR_RETURN(const std::vector<int32_t> prompt, Prompt(*m, tokens));
    std::vector<std::vector<double>> seconds(arms.size());
    for (int round = 0; round <= o.rounds; ++round) {  // round 0 warms up
      for (size_t k = 0; k < arms.size(); ++k) {
        const size_t a = (k + round) % arms.size();
        ASSIGN_OR_RETURN(const double s, Prefill(*m, threads, scorers, prompt, arms[a]));
        if (round > 0) seconds[a].push_back(s);
        bar.Update(++done);
      }
    }
    const double plain = Median(seconds[0]);
    // Per method, the median over rounds of its time over the same round's plain prefill.
    const auto overhead_pct = [&](size_t a) {
      std::vector<double> ratios;
      for (size_t r = 0; r < seconds[a].size(); ++r)
        ratios.push_back(seconds[a][r] / seconds[0][r]);
      return 100.0 * (Median(ratios) - 1.0);
    };
    json row = {{"prompt_tokens", tokens}, {"plain_ms", plain * 1e3}, {"methods", json::object()}};
    absl::StrAppend(&table, "\n| ", tokens, " | ", absl::StrFormat("%.1f", plain * 1e3), " |");
    for (size_t a = 1; a < arms.size(); ++a) {
      const double median = Median(seconds[a]);
      const double pct = overhead_pct(a);
      row["methods"][arms[a].method] = {{"ms", median * 1e3}, {"overhead_pct", pct}};
      absl::StrAppend(&table, absl::StrFormat(" %.1f (%+.1f %%) |", median * 1e3, pct));
    }
    out["rows"].push_back(row);
  }
  bar.Done();
  std::printf("%s\n", table.c_str());
  std::ofstream(o.json_path) << out.dump(2) << "\n";
  std::printf("medians of %d rounds, budget %.2f, fp16 pages; wrote %s\n", o.rounds, o.budget,
              o.json_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace glimpse::bench

int main(int argc, char** argv) {
  return glimpse::bench::BenchMain("glimpse_bench_overhead", argc, argv, glimpse::bench::ParseArgs,
                                   glimpse::bench::Run);
}
