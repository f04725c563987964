#include "tools/cli/cluster_commands.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "tools/cli/args.h"
#include "tools/cli/chat_client.h"
#include "tools/cli/local_cluster.h"

namespace glimpse::cli {
namespace {

std::vector<FlagSpec> PolicyFlags() {
  return {
      {"policy", "eviction method of the session (none, snapkv, lookahead, ...)", false,
       "the frontend's (up: none)"},
      {"budget", "kept share of the tokens, (0, 1], with --policy", false, "0.2"},
      {"codec", "KV page codec: fp16, bf16, fp8_e4m3, int8, kivi4, kivi2, fp32", false, "fp16"},
      {"decode-budget",
       "with --policy: while answering, cut each (layer, kv-head) back to this many entries every "
       "32 generated tokens (decode-time eviction; snapkv, pyramidkv, streamingllm, h2o, "
       "foresightkv)",
       false, "0 (none)"},
      {"max-tokens", "tokens generated per turn", false, "64"},
      {"session", "session id", false, "chat-<pid>"},
  };
}

std::vector<FlagSpec> UpFlags() {
  std::vector<FlagSpec> flags = {
      {"dir", "state and logs of the cluster", false, "$GLIMPSE_CACHE_DIR/cluster"},
      {"bin-dir", "where the glimpse-* service binaries are", false, "next to glimpse"},
      {"model", "GGUF model file", false, "the cached default model"},
      {"lookahead-module", "LookaheadKV module for --policy lookahead", false,
       "models/lookahead/<default model>.safetensors when present"},
      {"threads", "threads of each worker, 0 = one per core", false, "0"},
      {"prefill-threshold",
       "turns with more new tokens than this prefill on the prefill worker (0: every turn)", false,
       "128"},
      {"no-prefill-worker", "no prefill worker: decode workers prefill every turn", true, ""},
      {"etcd",
       "keep the coordinator's state in a local etcd member (<dir>/etcd) instead of RocksDB, and "
       "run two coordinators on it (one leads; the other takes over if it dies); the cache node "
       "announces itself there and the workers find it there",
       true, ""},
      {"lease-ttl", "a fixed lease for every session, e.g. 2s (predictable tiers for demos)", false,
       "the coordinator's estimator"},
      {"chat", "run a chat from stdin against the cluster, then stop it", true, ""},
  };
  for (FlagSpec& f : PolicyFlags()) flags.push_back(f);
  flags.push_back({"help", "show this help", true, ""});
  return flags;
}

std::vector<FlagSpec> ChatFlags() {
  std::vector<FlagSpec> flags = {
      {"frontend", "the frontend's host:port", false, ""},
      {"token", "bearer token (when the frontend has tenants)", false, ""},
      {"ca", "CA certificate of the frontend (TLS)", false, ""},
  };
  for (FlagSpec& f : PolicyFlags()) flags.push_back(f);
  flags.push_back({"help", "show this help", true, ""});
  return flags;
}

struct UpOptions {
  LocalClusterOptions cluster;
  ChatOptions chat;
  bool run_chat = false;
};

absl::Status ParseChat(const Args& a, ChatOptions* o) {
  o->session_id = a.GetString("session", absl::StrCat("chat-", getpid()));
  ASSIGN_OR_RETURN(int64_t max_tokens, a.GetInt("max-tokens", 64));
  if (max_tokens < 1 || max_tokens > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-tokens must be in [1, 100000], got ", max_tokens));
  }
  o->max_tokens = static_cast<int>(max_tokens);
  o->policy_method = a.GetString("policy");
  ASSIGN_OR_RETURN(o->budget_ratio, a.GetDouble("budget", 0.2));
  o->codec = a.GetString("codec", "fp16");
  ASSIGN_OR_RETURN(int64_t decode_budget, a.GetInt("decode-budget", 0));
  if (decode_budget < 0 || decode_budget > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--decode-budget must be in [0, 1048576], got ", decode_budget));
  }
  if (decode_budget > 0 && o->policy_method.empty()) {
    return absl::InvalidArgumentError("--decode-budget needs --policy (the method that evicts)");
  }
  o->decode_budget_tokens = static_cast<int32_t>(decode_budget);
  o->interactive = isatty(STDIN_FILENO) != 0;
  return absl::OkStatus();
}

std::string DefaultDir() {
  const char* env = std::getenv("GLIMPSE_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const std::string base = env != nullptr    ? env
                           : home != nullptr ? absl::StrCat(home, "/.cache/glimpse")
                                             : "/tmp/glimpse";
  return base + "/cluster";
}

absl::StatusOr<UpOptions> ParseUp(const Args& a) {
  UpOptions o;
  RETURN_IF_ERROR(ParseChat(a, &o.chat));
  o.cluster.dir = a.GetString("dir", DefaultDir());
  o.cluster.bin_dir = a.GetString("bin-dir");
  o.cluster.model = a.GetString("model");
  o.cluster.lookahead_module = a.GetString("lookahead-module");
  if (o.cluster.lookahead_module.empty() &&
      std::filesystem::exists(GLIMPSE_DEFAULT_LOOKAHEAD_MODULE)) {
    o.cluster.lookahead_module = GLIMPSE_DEFAULT_LOOKAHEAD_MODULE;
  }
  ASSIGN_OR_RETURN(int64_t threads, a.GetInt("threads", 0));
  o.cluster.threads = static_cast<int>(threads);
  o.cluster.lease_ttl = a.GetString("lease-ttl");
  ASSIGN_OR_RETURN(int64_t threshold, a.GetInt("prefill-threshold", 128));
  if (threshold < 0 || threshold > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill-threshold must be in [0, 1000000], got ", threshold));
  }
  o.cluster.prefill_on_decode_tokens = static_cast<int>(threshold);
  o.cluster.prefill_worker = !a.Has("no-prefill-worker");
  o.cluster.etcd = a.Has("etcd");
  if (!o.chat.policy_method.empty()) {
    o.cluster.policy_method = o.chat.policy_method;
    o.cluster.budget_ratio = o.chat.budget_ratio;
    o.cluster.codec = o.chat.codec;
  }
  o.run_chat = a.Has("chat");
  return o;
}

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted = true; }

absl::Status RunUp(const UpOptions& o) {
  std::cerr << "starting " << (o.cluster.etcd ? "two coordinators" : "coordinator")
            << ", cache node, decode worker, "
            << (o.cluster.prefill_worker ? "prefill worker " : "") << "and frontend (logs in "
            << o.cluster.dir << "/logs) ...\n";
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(o.cluster));
  if (o.cluster.etcd) std::cerr << "  etcd: " << cluster->etcd_endpoint() << "\n";
  for (const ClusterMember& m : cluster->members()) {
    std::cerr << "  " << m.name << ": grpc " << m.process.grpc_address() << ", metrics http://"
              << "127.0.0.1:" << m.process.metrics_port() << "/metrics\n";
  }
  if (o.run_chat) {
    ChatOptions chat = o.chat;
    chat.frontend = cluster->frontend_address();
    chat.interactive = false;
    absl::Status s = RunChat(chat, std::cin, std::cout);
    cluster->Stop();
    return s;
  }
  std::cout << "frontend: " << cluster->frontend_address() << "\n"
            << "openai: " << cluster->openai_url() << "\n"
            << "talk to it: glimpse chat --frontend " << cluster->frontend_address()
            << "\n  or: curl " << cluster->openai_url()
            << "/chat/completions -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'"
            << "\nCtrl-C stops the cluster.\n"
            << std::flush;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_interrupted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::cerr << "stopping ...\n";
  cluster->Stop();
  return absl::OkStatus();
}

absl::StatusOr<ChatOptions> ParseChatCommand(const Args& a) {
  ChatOptions o;
  RETURN_IF_ERROR(ParseChat(a, &o));
  o.frontend = a.GetString("frontend");
  if (o.frontend.empty()) return absl::InvalidArgumentError("--frontend host:port is required");
  o.token = a.GetString("token");
  o.tls.ca_file = a.GetString("ca");
  return o;
}

absl::Status RunChatCommand(const ChatOptions& o) { return RunChat(o, std::cin, std::cout); }

}  // namespace

int UpCommand(int argc, char** argv) {
  return RunSubcommand<UpOptions>("up", "[--chat] [flags]", UpFlags(), argc, argv, ParseUp, RunUp);
}

int ChatCommand(int argc, char** argv) {
  return RunSubcommand<ChatOptions>("chat", "--frontend HOST:PORT [flags]", ChatFlags(), argc, argv,
                                    ParseChatCommand, RunChatCommand);
}

}  // namespace glimpse::cli
