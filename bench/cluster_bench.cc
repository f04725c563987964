// Cluster benchmark (issue 7; docs/benchmarks.md "Cluster benchmark", figures in
// bench/RESULTS.md): the services as child processes on loopback — glimpse-coordinator,
// glimpse-cache-node, glimpse-decode-worker,
// glimpse-prefill-worker (unless --no_prefill_worker) and glimpse-frontend, started as
// tests/cluster_test.cc starts them — driven through the Frontend API with token-id
// conversations and the default model. The coordinator routes a turn with more than 128 new
// tokens to the prefill worker, which ships the kept KV to the decode worker. Three experiments:
//
//   ttft   A ~history_tokens conversation (a synthetic log in the first user message), then a
//          short new turn (~40 tokens), measured three ways per repetition, interleaved:
//            recompute  a fresh conversation (unique first tokens): nothing stored, every token
//                       prefilled;
//            hot        the same session's next turn, its lease alive (fixed 1 h TTL);
//            warm       the next turn after that, replayed under a new session id once the first
//                       session ended (its hot copy dropped): the state comes from the cache node.
//          Client TTFT = request sent → first token id received; the server's TurnStarted
//          load/prefill seconds and TurnDone ttft (worker: turn start → first token) beside it.
//          The recompute floor: Sequence::Forward of the recompute turn's tokens in this process,
//          same thread count, once per repetition.
//   bytes  Per policy, a recompute turn at the same history and the hot turn after it: the prefill
//          worker's shipped_bytes (the delivery of the kept pages to the decode worker), TurnDone
//          retained_bytes (the retained pages: what a warm reload ships to a worker) and what
//          the turn writes to the cache node (the prefill worker's stored_bytes, both tiers, plus
//          the decode worker's state_bytes at the end of the turn) against full_fp16_bytes.
//          TurnDone comes after decoding, so with max_tokens = 8 the 7 fed generated tokens are in
//          all of them (kept, never evicted); "prefill state" removes them: total_entries × fp16
//          bytes/entry ÷ (kept_entries × encoded bytes/entry).
//   load   for each count in `sessions` (1,2,4,8,16), that many client threads, each a
//          `turns`-turn session (short prompts, max_tokens), against the one decode worker, one
//          count after the other in the same run: generated tokens/s, TTFT and inter-token
//          latency (gaps between a turn's streamed tokens) p50/p99, tokens/s ÷ the first count's;
//          after one uncounted warm-up session.
//
// --experiments picks which of ttft, bytes and load run (default all three).
//
// Prints tables on stdout, progress on stderr, and writes everything to --json. Exit status 1 with
// a message on any error (a service that does not start, a failed turn).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/flags.h"
#include "core/common/grpc/server.h"
#include "core/common/service_process.h"
#include "core/common/status_macros.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "core/model/sequence.h"
#include "glimpse/v1/coordinator.grpc.pb.h"
#include "glimpse/v1/frontend.grpc.pb.h"
#include "kernels/cpu/parallel.h"
#include "nlohmann/json.hpp"
#include "proto/names.h"

namespace glimpse::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Options {
  bool quick = false;
  bool prefill_worker = true;
  int history_tokens = 2048;
  int reps = 3;
  int threads = 2;  // decode worker and the in-process floor
  std::vector<int> sessions = {1, 2, 4, 8, 16};
  std::vector<std::string> experiments = {"ttft", "bytes", "load"};
  int turns = 3;
  int max_tokens = 32;      // load experiment
  int ttft_max_tokens = 8;  // ttft and bytes experiments
  std::vector<std::string> ttft_policies = {"none:0:fp16", "snapkv:0.2:int8", "lookahead:0.2:int8"};
  std::vector<std::string> bytes_policies = {"none:0:fp16", "none:0:int8", "snapkv:0.2:int8",
                                             "lookahead:0.2:int8", "snapkv:0.2:kivi4"};
  std::string dir = GLIMPSE_BENCH_DIR;
  std::string json_path = GLIMPSE_BENCH_JSON;
};

constexpr char kUsage[] =
    "usage: glimpse_bench_cluster [--quick] [--no_prefill_worker] [--history_tokens N] [--reps N]\n"
    "         [--threads N]\n"
    "         [--sessions N,N] [--turns N] [--max_tokens N] [--ttft_policies P,P]\n"
    "         [--bytes_policies P,P] [--experiments ttft,bytes,load] [--dir DIR] [--json PATH]\n"
    "A policy is method:ratio:codec (none:0:fp16, snapkv:0.2:int8). Defaults: 2048-token history,\n"
    "3 repetitions, 2 threads, 1,2,4,8,16 sessions x 3 turns x 32 tokens. --quick: 512-token\n"
    "history, 1 repetition, 1,8 sessions x 2 turns x 16 tokens, policies none:0:fp16 and\n"
    "snapkv:0.2:int8.\n";

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::find(args.begin(), args.end(), "--quick") != args.end()) {
    o.quick = true;
    o.history_tokens = 512;
    o.reps = 1;
    o.turns = 2;
    o.max_tokens = 16;
    o.sessions = {1, 8};
    o.ttft_policies = {"none:0:fp16", "snapkv:0.2:int8"};
    o.bytes_policies = {"none:0:fp16", "snapkv:0.2:int8"};
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (flag == "--quick") continue;
    if (flag == "--no_prefill_worker") {
      o.prefill_worker = false;
      continue;
    }
    if (flag == "-h" || flag == "--help") return absl::CancelledError(kUsage);
    if (size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value\n", kUsage));
    }
    if (flag == "--history_tokens") {
      ASSIGN_OR_RETURN(o.history_tokens, ParsePositive(flag, value));
    } else if (flag == "--reps") {
      ASSIGN_OR_RETURN(o.reps, ParsePositive(flag, value));
    } else if (flag == "--threads") {
      ASSIGN_OR_RETURN(o.threads, ParsePositive(flag, value));
    } else if (flag == "--sessions") {
      o.sessions.clear();
      for (absl::string_view n : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        ASSIGN_OR_RETURN(int count, ParsePositive(flag, std::string(n)));
        o.sessions.push_back(count);
      }
      if (o.sessions.empty()) return absl::InvalidArgumentError("--sessions needs counts");
    } else if (flag == "--experiments") {
      o.experiments = absl::StrSplit(value, ',', absl::SkipEmpty());
      for (const std::string& e : o.experiments) {
        if (e != "ttft" && e != "bytes" && e != "load") {
          return absl::InvalidArgumentError(
              absl::StrCat("--experiments: unknown experiment '", e, "' (ttft, bytes, load)"));
        }
      }
    } else if (flag == "--turns") {
      ASSIGN_OR_RETURN(o.turns, ParsePositive(flag, value));
    } else if (flag == "--max_tokens") {
      ASSIGN_OR_RETURN(o.max_tokens, ParsePositive(flag, value));
    } else if (flag == "--ttft_policies") {
      o.ttft_policies = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (flag == "--bytes_policies") {
      o.bytes_policies = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (flag == "--dir") {
      o.dir = value;
    } else if (flag == "--json") {
      o.json_path = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'\n", kUsage));
    }
  }
  return o;
}

// "snapkv:0.2:int8" -> EvictionPolicy.
absl::StatusOr<v1::EvictionPolicy> ParsePolicy(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  double ratio = 0;
  if (parts.size() != 3 || !absl::SimpleAtod(parts[1], &ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy '", text, "' is not method:ratio:codec (e.g. snapkv:0.2:int8)"));
  }
  v1::EvictionPolicy p;
  p.set_method(parts[0]);
  p.set_budget_ratio(ratio);
  p.set_codec(parts[2]);
  return p;
}

// "snapkv:0.2:int8" -> "snapkv-0.2-int8" (session ids and conversation tags).
std::string Slug(const std::string& policy) { return absl::StrReplaceAll(policy, {{":", "-"}}); }

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}
double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

// ---------------------------------------------------------------------------------------------
// The cluster: four child processes, state and logs under one directory.

class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const Options& o) {
    std::unique_ptr<Cluster> c(new Cluster());
    c->dir_ = o.dir;
    std::error_code ec;
    fs::remove_all(c->dir_, ec);  // a fresh cache node: nothing stored before this run
    fs::create_directories(c->dir_, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", o.dir, ": ", ec.message()));
    ASSIGN_OR_RETURN(const ServiceProcess* coordinator,
                     c->Add("coordinator", GLIMPSE_COORDINATOR_BINARY,
                            {"--store.path=" + (c->dir_ / "coordinator").string(),
                             "--membership.heartbeat_interval=300ms", "--lease.fixed_ttl=1h",
                             "--lease.max_ttl=2h"}));
    ASSIGN_OR_RETURN(
        const ServiceProcess* cache,
        c->Add("cache-node", GLIMPSE_CACHE_NODE_BINARY,
               {"--storage.path=" + (c->dir_ / "cache").string(), "--storage.sync_every_put=false",
                "--coordinator=" + coordinator->grpc_address()}));
    RETURN_IF_ERROR(c->Add("decode-worker", GLIMPSE_DECODE_WORKER_BINARY,
                           {"--coordinator=" + coordinator->grpc_address(),
                            "--cache_node=" + cache->grpc_address(), "--node_id=d1",
                            absl::StrCat("--threads=", o.threads), "--kv_memory=4GiB",
                            "--lookahead_module=" GLIMPSE_LOOKAHEAD_MODULE})
                        .status());
    if (o.prefill_worker) {
      RETURN_IF_ERROR(c->Add("prefill-worker", GLIMPSE_PREFILL_WORKER_BINARY,
                             {"--coordinator=" + coordinator->grpc_address(),
                              "--cache_node=" + cache->grpc_address(), "--node_id=p1",
                              absl::StrCat("--threads=", o.threads),
                              "--lookahead_module=" GLIMPSE_LOOKAHEAD_MODULE})
                          .status());
    }
    ASSIGN_OR_RETURN(const ServiceProcess* frontend,
                     c->Add("frontend", GLIMPSE_FRONTEND_BINARY,
                            {"--coordinator=" + coordinator->grpc_address()}));
    ASSIGN_OR_RETURN(auto channel, ClientChannel(frontend->grpc_address()));
    c->stub_ = v1::Frontend::NewStub(channel);
    RETURN_IF_ERROR(c->AwaitNode(coordinator->grpc_address(), v1::NODE_ROLE_DECODE));
    if (o.prefill_worker) {
      RETURN_IF_ERROR(c->AwaitNode(coordinator->grpc_address(), v1::NODE_ROLE_PREFILL));
    }
    return c;
  }
  ~Cluster() {
    while (!members_.empty()) {
      members_.back()->Terminate(absl::Seconds(10)).IgnoreError();
      members_.pop_back();
    }
  }
  v1::Frontend::Stub& stub() { return *stub_; }
  const fs::path& dir() const { return dir_; }

 private:
  Cluster() = default;
  absl::StatusOr<ServiceProcess*> Add(const std::string& name, const std::string& binary,
                                      std::vector<std::string> args) {
    args.push_back("--shutdown_grace=500ms");
    const std::string log = (dir_ / (name + ".log")).string();
    absl::StatusOr<ServiceProcess> p = ServiceProcess::Start(binary, args, log, absl::Seconds(90));
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat(name, ": ", p.status().message(),
                                                          "\n--- ", log, " ---\n", Tail(log)));
    }
    members_.push_back(std::make_unique<ServiceProcess>(*std::move(p)));
    return members_.back().get();
  }
  absl::Status AwaitNode(const std::string& coordinator, v1::NodeRole role) {
    ASSIGN_OR_RETURN(auto channel, ClientChannel(coordinator));
    auto stub = v1::Coordinator::NewStub(channel);
    for (int i = 0; i < 600; ++i) {
      grpc::ClientContext ctx;
      v1::ListNodesRequest req;
      req.set_role(role);
      v1::ListNodesResponse resp;
      if (stub->ListNodes(&ctx, req, &resp).ok() && resp.nodes_size() > 0) {
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("no ", v1::NodeRole_Name(role), " node registered within 30 s"));
  }

  fs::path dir_;
  std::vector<std::unique_ptr<ServiceProcess>> members_;
  std::unique_ptr<v1::Frontend::Stub> stub_;
};

// ---------------------------------------------------------------------------------------------
// One turn through the Frontend API.

struct Turn {
  double client_ttft = 0;  // request sent -> first token id received
  double wall = 0;         // request sent -> stream finished (lease included)
  v1::TurnStarted started;
  v1::PrefillResponse prefill;  // set when a prefill worker prefilled the turn
  bool on_prefill_worker = false;
  v1::TurnDone done;
  std::vector<int32_t> generated;
  std::vector<double> itl;  // seconds between streamed tokens (an event's gap split among its ids)
};

absl::StatusOr<Turn> RunTurn(v1::Frontend::Stub& stub, const std::string& session,
                             const std::vector<int32_t>& tokens, const v1::EvictionPolicy& policy,
                             int max_tokens) {
  v1::GenerateRequest req;
  req.set_session_id(session);
  req.mutable_tokens()->mutable_ids()->Add(tokens.begin(), tokens.end());
  req.mutable_sampling()->set_max_tokens(max_tokens);  // temperature 0: greedy
  *req.mutable_policy() = policy;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  Turn t;
  const auto t0 = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateEvent e;
  bool have_done = false;
  double last_token = 0;  // when the last tokens event came
  while (reader->Read(&e)) {
    if (e.has_started()) {
      t.started = e.started();
      t.on_prefill_worker = !e.prefill_worker_id().empty();
      t.prefill = e.prefill();
    }
    if (e.has_tokens() && e.tokens().token_ids_size() > 0) {
      const double now = Seconds(t0);
      const int n = e.tokens().token_ids_size();
      if (t.generated.empty()) {
        t.client_ttft = now;
      } else {
        for (int k = 0; k < n; ++k) t.itl.push_back((now - last_token) / n);
      }
      last_token = now;
      t.generated.insert(t.generated.end(), e.tokens().token_ids().begin(),
                         e.tokens().token_ids().end());
    }
    if (e.has_done()) {
      t.done = e.done();
      have_done = true;
    }
  }
  const grpc::Status status = reader->Finish();
  t.wall = Seconds(t0);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("session ", session, ": ", status.error_message()));
  }
  if (!have_done || t.generated.empty()) {
    return absl::InternalError(absl::StrCat("session ", session, ": no done event or no tokens"));
  }
  return t;
}

absl::Status EndSession(v1::Frontend::Stub& stub, const std::string& session) {
  grpc::ClientContext ctx;
  v1::EndSessionRequest req;
  req.set_session_id(session);
  v1::EndSessionResponse resp;
  grpc::Status s = stub.EndSession(&ctx, req, &resp);
  return s.ok() ? absl::OkStatus() : absl::InternalError(s.error_message());
}

// ---------------------------------------------------------------------------------------------
// Conversations as ChatML token ids (the frontend's chat path renders the same shape).

class Conversations {
 public:
  explicit Conversations(const model::Model& m) : tok_(m.tokenizer()) {}

  // A first turn whose tokens before the question are exactly `history` long: a system line
  // naming `tag` (so no two conversations share a prefix), then a synthetic inventory log.
  std::vector<int32_t> First(const std::string& tag, int history) const {
    std::vector<int32_t> ids =
        tok_.Encode(absl::StrCat("<|im_start|>system\nYou are the records clerk for case ", tag,
                                 ".<|im_end|>\n<|im_start|>user\nHere is the inventory log:\n"));
    const std::vector<int32_t> log = LogTokens(history);
    for (size_t i = 0; ids.size() < static_cast<size_t>(history); ++i) ids.push_back(log[i]);
    ids.resize(history);
    Append(&ids,
           "\n\nQuestion: which entries mention room 7, and what was moved there? Answer "
           "in one short sentence, citing the entry numbers.<|im_end|>\n"
           "<|im_start|>assistant\n");
    return ids;
  }
  // A short first turn for the load experiment.
  std::vector<int32_t> Short(int k) const {
    static const char* kTopics[] = {"a lighthouse keeper", "a lost robot", "a mountain village",
                                    "a river pilot",       "a clockmaker", "a desert station",
                                    "a night train",       "a library cat"};
    return tok_.Encode(
        absl::StrCat("<|im_start|>system\nYou are a helpful assistant (client ", k,
                     ").<|im_end|>\n<|im_start|>user\nWrite a long, detailed story about ",
                     kTopics[k % 8], ".<|im_end|>\n<|im_start|>assistant\n"));
  }
  // `prev` (the previous request), its answer, then a new user turn (~40 tokens).
  std::vector<int32_t> Next(std::vector<int32_t> prev, const std::vector<int32_t>& answer,
                            int k) const {
    prev.insert(prev.end(), answer.begin(), answer.end());
    const bool ended = !answer.empty() && tok_.IsEndOfGeneration(answer.back());
    Append(&prev, absl::StrCat(ended ? "" : "<|im_end|>", "\n<|im_start|>user\nFollow-up ", k,
                               ": now list every entry that mentions a shelf number above 40, "
                               "and for each one say which room it came from and on which "
                               "day.<|im_end|>\n<|im_start|>assistant\n"));
    return prev;
  }

 private:
  void Append(std::vector<int32_t>* ids, const std::string& text) const {
    const std::vector<int32_t> more = tok_.Encode(text);
    ids->insert(ids->end(), more.begin(), more.end());
  }
  // Deterministic log lines (a fixed LCG), at least `n` tokens.
  std::vector<int32_t> LogTokens(int n) const {
    static const char* kColor[] = {"red", "blue", "green", "grey", "white", "black", "amber"};
    static const char* kThing[] = {"valve", "crate", "ladder", "lamp", "drill", "cable", "pump"};
    uint64_t x = 12345;
    auto next = [&x](int mod) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int>((x >> 33) % mod);
    };
    std::string text;
    std::vector<int32_t> ids;
    for (int entry = 1; static_cast<int>(ids.size()) < n; entry += 50) {
      for (int i = entry; i < entry + 50; ++i) {
        absl::StrAppend(&text, "Entry ", i, ": the ", kColor[next(7)], " ", kThing[next(7)],
                        " in room ", next(12), " was moved to shelf ", next(60), " on day ",
                        next(30), ".\n");
      }
      ids = tok_.Encode(text);
    }
    return ids;
  }

  const model::Tokenizer& tok_;
};

// ---------------------------------------------------------------------------------------------
// Experiment 1: TTFT by source.

struct SourceSample {
  std::string source;  // requested: recompute, hot or warm
  Turn turn;
};

json TurnJson(const std::string& policy, const std::string& wanted, int rep, const Turn& t) {
  return {{"policy", policy},
          {"wanted", wanted},
          {"rep", rep},
          {"source", v1::StateSourceName(t.started.source())},
          {"client_ttft_s", t.client_ttft},
          {"server_ttft_s", t.done.ttft_seconds()},
          {"load_s", t.started.load_seconds()},
          {"prefill_s", t.started.prefill_seconds()},
          {"on_prefill_worker", t.on_prefill_worker ? 1.0 : 0.0},
          {"prefill_worker_s",
           t.prefill.load_seconds() + t.prefill.prefill_seconds() + t.prefill.ship_seconds()},
          {"shipped_bytes", t.prefill.shipped_bytes()},
          {"delivered_tokens", t.prefill.delivered_tokens()},
          {"reused_tokens", t.started.reused_tokens()},
          {"prefilled_tokens", t.started.prefilled_tokens()},
          {"kept_entries", t.started.kept_entries()},
          {"total_entries", t.started.total_entries()},
          {"generated_tokens", t.done.generated_tokens()},
          {"kv_tokens", t.done.kv_tokens()},
          {"kv_entries", t.done.kv_entries()},
          {"retained_bytes", t.done.retained_bytes()},
          {"state_bytes", t.done.state_bytes()},
          {"full_fp16_bytes", t.done.full_fp16_bytes()},
          {"wall_s", t.wall}};
}

// recompute -> hot -> warm for one policy, one repetition.
absl::StatusOr<std::vector<SourceSample>> SourceRound(Cluster& c, const Conversations& conv,
                                                      const std::string& policy_text, int rep,
                                                      const Options& o,
                                                      std::vector<int32_t>* recompute_tokens) {
  ASSIGN_OR_RETURN(v1::EvictionPolicy policy, ParsePolicy(policy_text));
  const std::string id = absl::StrCat("ttft-", Slug(policy_text), "-r", rep);
  std::vector<SourceSample> out;
  std::vector<int32_t> tokens = conv.First(id, o.history_tokens);
  *recompute_tokens = tokens;
  ASSIGN_OR_RETURN(Turn r, RunTurn(c.stub(), id + "-a", tokens, policy, o.ttft_max_tokens));
  out.push_back({"recompute", r});
  tokens = conv.Next(tokens, r.generated, 1);
  ASSIGN_OR_RETURN(Turn h, RunTurn(c.stub(), id + "-a", tokens, policy, o.ttft_max_tokens));
  out.push_back({"hot", h});
  RETURN_IF_ERROR(EndSession(c.stub(), id + "-a"));
  tokens = conv.Next(tokens, h.generated, 2);
  ASSIGN_OR_RETURN(Turn w, RunTurn(c.stub(), id + "-b", tokens, policy, o.ttft_max_tokens));
  out.push_back({"warm", w});
  RETURN_IF_ERROR(EndSession(c.stub(), id + "-b"));
  for (const SourceSample& s : out) {
    const std::string got = v1::StateSourceName(s.turn.started.source());
    std::cerr << absl::StrFormat(
        "[ttft] rep %d %-20s %-9s client %.3f s (load %.3f, prefill %.3f; reused %d, prefilled "
        "%d)%s\n",
        rep + 1, policy_text, s.source, s.turn.client_ttft, s.turn.started.load_seconds(),
        s.turn.started.prefill_seconds(), s.turn.started.reused_tokens(),
        s.turn.started.prefilled_tokens(), got == s.source ? "" : " SOURCE WAS " + got);
  }
  return out;
}

// The recompute floor: the same tokens through Sequence::Forward in this process.
absl::StatusOr<double> FloorSeconds(const model::Model& m, kernels::ThreadPool& pool,
                                    const std::vector<int32_t>& tokens) {
  model::Sequence session(m, pool);
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(session.Forward(tokens).status());
  return Seconds(t0);
}

struct TtftResult {
  json samples = json::array();
  std::vector<double> floor_s;
  int recompute_tokens = 0;
};

absl::StatusOr<TtftResult> RunTtft(Cluster& c, const model::Model& m, const Options& o) {
  Conversations conv(m);
  kernels::ThreadPool pool(o.threads);
  TtftResult res;
  // Warm-up (discarded): first-use costs (scorer and module load, page faults) per policy.
  for (const std::string& p : o.ttft_policies) {
    ASSIGN_OR_RETURN(v1::EvictionPolicy policy, ParsePolicy(p));
    const std::string id = "warmup-" + Slug(p);
    RETURN_IF_ERROR(RunTurn(c.stub(), id, conv.First(id, 128), policy, 2).status());
    RETURN_IF_ERROR(EndSession(c.stub(), id));
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    std::vector<int32_t> tokens;
    for (const std::string& p : o.ttft_policies) {
      ASSIGN_OR_RETURN(std::vector<SourceSample> round, SourceRound(c, conv, p, rep, o, &tokens));
      for (const SourceSample& s : round) res.samples.push_back(TurnJson(p, s.source, rep, s.turn));
    }
    ASSIGN_OR_RETURN(double floor, FloorSeconds(m, pool, tokens));
    res.floor_s.push_back(floor);
    res.recompute_tokens = static_cast<int>(tokens.size());
    std::cerr << absl::StrFormat("[ttft] rep %d floor: Sequence::Forward of %d tokens %.3f s\n",
                                 rep + 1, tokens.size(), floor);
  }
  return res;
}

// Median of `field` over samples of one policy and requested source.
double MedianOf(const json& samples, const std::string& policy, const std::string& source,
                const std::string& field) {
  std::vector<double> v;
  for (const json& s : samples) {
    if (s["policy"] == policy && s["wanted"] == source) v.push_back(s[field].get<double>());
  }
  return Median(v);
}

json PrintTtft(const TtftResult& r, const Options& o) {
  const double floor = Median(r.floor_s);
  std::printf("\nTTFT by source, ~%d-token history (%d reps, medians; max_tokens %d)\n",
              o.history_tokens, o.reps, o.ttft_max_tokens);
  std::printf(
      "recompute floor: Sequence::Forward of the %d recompute tokens in-process, %d "
      "threads: %.3f s\n",
      r.recompute_tokens, o.threads, floor);
  std::printf(
      "| policy | source | client TTFT s | server TTFT s | prefill worker s | load s | prefill s "
      "| reused | prefilled | / recompute |\n|---|---|---|---|---|---|---|---|---|---|\n");
  json summary = json::array();
  for (const std::string& p : o.ttft_policies) {
    const double rc = MedianOf(r.samples, p, "recompute", "client_ttft_s");
    for (const char* src : {"recompute", "hot", "warm"}) {
      const double ttft = MedianOf(r.samples, p, src, "client_ttft_s");
      json row = {{"policy", p},
                  {"source", src},
                  {"client_ttft_s", ttft},
                  {"server_ttft_s", MedianOf(r.samples, p, src, "server_ttft_s")},
                  {"load_s", MedianOf(r.samples, p, src, "load_s")},
                  {"prefill_s", MedianOf(r.samples, p, src, "prefill_s")},
                  {"prefill_worker_s", MedianOf(r.samples, p, src, "prefill_worker_s")},
                  {"on_prefill_worker", MedianOf(r.samples, p, src, "on_prefill_worker")},
                  {"reused_tokens", MedianOf(r.samples, p, src, "reused_tokens")},
                  {"prefilled_tokens", MedianOf(r.samples, p, src, "prefilled_tokens")},
                  {"ratio_to_recompute", ttft / rc}};
      const double on_prefill = row["on_prefill_worker"].get<double>();
      const std::string worker_s =
          on_prefill > 0 ? absl::StrFormat("%.3f", row["prefill_worker_s"].get<double>()) : "—";
      std::printf("| %s | %s | %.3f | %.3f | %s | %.3f | %.3f | %.0f | %.0f | %.3f |\n", p.c_str(),
                  src, ttft, row["server_ttft_s"].get<double>(), worker_s.c_str(),
                  row["load_s"].get<double>(), row["prefill_s"].get<double>(),
                  row["reused_tokens"].get<double>(), row["prefilled_tokens"].get<double>(),
                  ttft / rc);
      summary.push_back(row);
    }
  }
  return {{"floor_s", floor},
          {"floor_runs_s", r.floor_s},
          {"recompute_tokens", r.recompute_tokens},
          {"summary", summary},
          {"samples", r.samples}};
}

// ---------------------------------------------------------------------------------------------
// Experiment 2: bytes per turn.

// One policy: a recompute turn (its state written whole) and the hot turn after it (what a later
// turn writes), at the --history_tokens history.
// `heads`: the model's (layer, kv-head) pairs, i.e. KV entries per token.
absl::StatusOr<json> BytesRow(Cluster& c, const Conversations& conv, const std::string& p,
                              int heads, const Options& o) {
  ASSIGN_OR_RETURN(v1::EvictionPolicy policy, ParsePolicy(p));
  const std::string id = "bytes-" + Slug(p);
  const std::vector<int32_t> first = conv.First(id, o.history_tokens);
  ASSIGN_OR_RETURN(Turn t, RunTurn(c.stub(), id, first, policy, o.ttft_max_tokens));
  ASSIGN_OR_RETURN(
      Turn t2, RunTurn(c.stub(), id, conv.Next(first, t.generated, 1), policy, o.ttft_max_tokens));
  RETURN_IF_ERROR(EndSession(c.stub(), id));
  const v1::TurnDone& d = t.done;
  // Kept and total entries where the prompt was prefilled and evicted.
  const int64_t kept = t.on_prefill_worker ? t.prefill.kept_entries() : t.started.kept_entries();
  const int64_t total = t.on_prefill_worker ? t.prefill.total_entries() : t.started.total_entries();
  // Per entry (one token of one kv-head of one layer, K and V): fp16 and as encoded here.
  const double fp16_per_entry = d.full_fp16_bytes() / (static_cast<double>(heads) * d.kv_tokens());
  const double encoded_per_entry = static_cast<double>(d.retained_bytes()) / d.kv_entries();
  const double ratio = static_cast<double>(d.full_fp16_bytes()) / d.retained_bytes();
  const double prefill_ratio = (total * fp16_per_entry) / (kept * encoded_per_entry);
  // Turn 1 writes twice when a prefill worker prefilled it: both tiers from the prefill worker,
  // then the decode worker's state at the end of the turn.
  const uint64_t stored1 = d.state_bytes() + t.prefill.stored_bytes();
  const double written1 = static_cast<double>(d.full_fp16_bytes()) / stored1;
  const double written2 = static_cast<double>(t2.done.full_fp16_bytes()) / t2.done.state_bytes();
  // The delivery summarises all the prompt's tokens but the last, before any is generated.
  const double shipped_ratio = t.on_prefill_worker
                                   ? fp16_per_entry * heads * t.prefill.delivered_tokens() /
                                         static_cast<double>(t.prefill.shipped_bytes())
                                   : 0.0;
  const std::string shipped =
      t.on_prefill_worker
          ? absl::StrFormat("%llu (%.2f×)",
                            static_cast<unsigned long long>(t.prefill.shipped_bytes()),
                            shipped_ratio)
          : "—";
  std::printf(
      "| %s | %lld | %lld / %lld | %s | %llu | %.2f× | %.2f× | %llu (%.2f×) | %llu (%.2f×) |\n",
      p.c_str(), static_cast<long long>(d.kv_tokens()), static_cast<long long>(kept),
      static_cast<long long>(total), shipped.c_str(),
      static_cast<unsigned long long>(d.retained_bytes()), ratio, prefill_ratio,
      static_cast<unsigned long long>(stored1), written1,
      static_cast<unsigned long long>(t2.done.state_bytes()), written2);
  json row = TurnJson(p, "recompute", 0, t);
  row["fp16_bytes_per_entry"] = fp16_per_entry;
  row["encoded_bytes_per_entry"] = encoded_per_entry;
  row["fp16_over_retained"] = ratio;
  row["prefill_fp16_over_retained"] = prefill_ratio;
  row["fp16_over_shipped"] = shipped_ratio;
  row["kept_entries_at_prefill"] = kept;
  row["total_entries_at_prefill"] = total;
  row["fp16_over_state_written"] = written1;
  row["next_turn"] = TurnJson(p, "hot", 0, t2);
  row["next_turn"]["fp16_over_state_written"] = written2;
  std::cerr << absl::StrFormat("[bytes] %s: retained %llu B, fp16 %llu B (%.2f×)\n", p,
                               static_cast<unsigned long long>(d.retained_bytes()),
                               static_cast<unsigned long long>(d.full_fp16_bytes()), ratio);
  return row;
}

absl::StatusOr<json> RunBytes(Cluster& c, const model::Model& m, const Options& o) {
  Conversations conv(m);
  json rows = json::array();
  std::printf(
      "\nBytes per turn at a %d-token history + question, max_tokens %d (full fp16 = the "
      "unevicted fp16 KV of the same tokens)\n",
      o.history_tokens, o.ttft_max_tokens);
  std::printf(
      "| policy | kv tokens | kept / total entries | shipped to the decode worker B (fp16 /) | "
      "retained B = warm reload | fp16 / retained | same, prefill state | written, turn 1 B "
      "(fp16 /) | written, turn 2 B (fp16 /) |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& p : o.bytes_policies) {
    ASSIGN_OR_RETURN(json row,
                     BytesRow(c, conv, p, m.config().n_layers * m.config().n_kv_heads, o));
    rows.push_back(row);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Experiment 3: concurrent sessions.

struct LoadRun {
  int sessions = 0;
  double wall_s = 0;
  int64_t generated = 0;
  int turns = 0;
  std::vector<double> ttft_s;
  std::vector<double> itl_s;
  std::map<std::string, int> sources;
};

absl::StatusOr<LoadRun> RunSessions(Cluster& c, const Conversations& conv, int sessions,
                                    const std::string& tag, const Options& o) {
  std::vector<std::vector<Turn>> turns(sessions);
  std::vector<absl::Status> errors(sessions);
  const v1::EvictionPolicy policy;  // the frontend's default: none, fp16
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int k = 0; k < sessions; ++k) {
    threads.emplace_back([&, k] {
      const std::string id = absl::StrCat("load-", tag, "-", k);
      std::vector<int32_t> tokens = conv.Short(k);
      for (int i = 0; i < o.turns; ++i) {
        if (i > 0) tokens = conv.Next(tokens, turns[k].back().generated, i);
        absl::StatusOr<Turn> t = RunTurn(c.stub(), id, tokens, policy, o.max_tokens);
        if (!t.ok()) {
          errors[k] = t.status();
          return;
        }
        turns[k].push_back(*std::move(t));
      }
      errors[k] = EndSession(c.stub(), id);
    });
  }
  for (std::thread& t : threads) t.join();
  LoadRun run;
  run.sessions = sessions;
  run.wall_s = Seconds(t0);
  for (int k = 0; k < sessions; ++k) {
    RETURN_IF_ERROR(errors[k]);
    for (const Turn& t : turns[k]) {
      run.generated += t.done.generated_tokens();
      ++run.turns;
      run.ttft_s.push_back(t.client_ttft);
      run.itl_s.insert(run.itl_s.end(), t.itl.begin(), t.itl.end());
      ++run.sources[v1::StateSourceName(t.started.source())];
    }
  }
  std::cerr << absl::StrFormat("[load] %d session(s): %d turns, %d tokens in %.2f s\n", sessions,
                               run.turns, run.generated, run.wall_s);
  return run;
}

json LoadJson(const LoadRun& r) {
  return {{"sessions", r.sessions},
          {"turns", r.turns},
          {"generated_tokens", r.generated},
          {"wall_s", r.wall_s},
          {"tokens_per_s", r.generated / r.wall_s},
          {"turns_per_s", r.turns / r.wall_s},
          {"ttft_p50_s", Quantile(r.ttft_s, 0.5)},
          {"ttft_p99_s", Quantile(r.ttft_s, 0.99)},
          {"itl_p50_s", Quantile(r.itl_s, 0.5)},
          {"itl_p99_s", Quantile(r.itl_s, 0.99)},
          {"sources", r.sources}};
}

absl::StatusOr<json> RunLoad(Cluster& c, const model::Model& m, const Options& o) {
  Conversations conv(m);
  // One session first, not counted: the first turns after start-up page in code and weights.
  RETURN_IF_ERROR(RunSessions(c, conv, 1, "warmup", o).status());
  std::vector<LoadRun> runs;
  for (int n : o.sessions) {
    ASSIGN_OR_RETURN(LoadRun r, RunSessions(c, conv, n, absl::StrCat("n", n), o));
    runs.push_back(std::move(r));
  }
  std::printf(
      "\nThroughput: sessions x %d turns, max_tokens %d, policy none/fp16, one decode "
      "worker (%d threads; decodes batched by its engine)\n",
      o.turns, o.max_tokens, o.threads);
  std::printf(
      "| sessions | turns | tokens | wall s | tokens/s | ÷ %d session(s) | TTFT p50 s | TTFT p99 s "
      "| ITL p50 s | ITL p99 s | sources |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
      o.sessions.front());
  json rows = json::array();
  for (const LoadRun& r : runs) {
    json j = LoadJson(r);
    j["tokens_per_s_ratio"] =
        j["tokens_per_s"].get<double>() / (runs.front().generated / runs.front().wall_s);
    std::string sources;
    for (const auto& [name, n] : r.sources) absl::StrAppend(&sources, name, " ", n, " ");
    std::printf("| %d | %d | %lld | %.2f | %.1f | %.2f× | %.3f | %.3f | %.4f | %.4f | %s|\n",
                r.sessions, r.turns, static_cast<long long>(r.generated), r.wall_s,
                j["tokens_per_s"].get<double>(), j["tokens_per_s_ratio"].get<double>(),
                j["ttft_p50_s"].get<double>(), j["ttft_p99_s"].get<double>(),
                j["itl_p50_s"].get<double>(), j["itl_p99_s"].get<double>(), sources.c_str());
    rows.push_back(j);
  }
  return json{{"runs", rows}};
}

absl::Status Run(const Options& o) {
  ASSIGN_OR_RETURN(std::string model_path, model::EnsureDefaultModel());
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::Model::Load(model_path));
  std::cerr << "[cluster] starting coordinator, cache node, decode worker, "
            << (o.prefill_worker ? "prefill worker, " : "") << "frontend in " << o.dir << "\n";
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<Cluster> c, Cluster::Start(o));
  std::cerr << absl::StrFormat("[cluster] up in %.1f s\n", Seconds(t0));
  json out = {{"model", model_path},
              {"history_tokens", o.history_tokens},
              {"reps", o.reps},
              {"threads", o.threads},
              {"quick", o.quick}};
  auto wanted = [&](std::string_view e) {
    return std::find(o.experiments.begin(), o.experiments.end(), e) != o.experiments.end();
  };
  if (wanted("ttft")) {
    ASSIGN_OR_RETURN(TtftResult ttft, RunTtft(*c, *m, o));
    out["ttft"] = PrintTtft(ttft, o);
  }
  if (wanted("bytes")) {
    ASSIGN_OR_RETURN(out["bytes"], RunBytes(*c, *m, o));
  }
  if (wanted("load")) {
    ASSIGN_OR_RETURN(out["load"], RunLoad(*c, *m, o));
  }
  std::ofstream f(o.json_path);
  f << out.dump(2) << "\n";
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", o.json_path));
  std::printf("\nwrote %s (service logs in %s)\n", o.json_path.c_str(), o.dir.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace glimpse::bench

int main(int argc, char** argv) {
  absl::StatusOr<glimpse::bench::Options> o = glimpse::bench::ParseArgs(argc, argv);
  if (!o.ok()) {
    const bool help = absl::IsCancelled(o.status());
    (help ? std::cout : std::cerr) << o.status().message() << (help ? "" : "\n");
    return help ? 0 : 2;
  }
  if (absl::Status s = glimpse::bench::Run(*o); !s.ok()) {
    std::cerr << "glimpse_bench_cluster: " << s << "\n";
    return 1;
  }
  return 0;
}
