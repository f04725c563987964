#include "frontend/frontend_config.h"

#include <filesystem>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/common/grpc/service_main.h"
#include "core/common/http_server.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace glimpse::frontend {
namespace {

absl::StatusOr<int32_t> PositiveInt32(const Config& c, const char* key) {
  const int64_t v = c.GetInt(key);
  if (v < 1 || v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d must be in [1, 2^31)", key, v));
  }
  return static_cast<int32_t>(v);
}

}  // namespace

std::vector<ConfigKey> FrontendConfigKeys() {
  using T = ConfigType;
  std::vector<ConfigKey> keys = {
      {"coordinator", T::kStringList, "",
       "The coordinator's gRPC address (host:port); several, comma-separated, where "
       "coordinators are elected on etcd (the leader answers).",
       true},
      {"model", T::kString, "",
       "GGUF model file or Hugging Face directory (tokenizer, chat template, vocabulary, context, "
       "fingerprint); empty: the default model, fetched and cached as `glimpse generate` does."},
      {"auth.tokens_file", T::kString, "",
       "YAML map bearer token -> tenant; empty: no authentication, every caller is tenant "
       "\"default\"."},
      {"auth.salt_secret_file", T::kString, "",
       "Secret (>= 16 bytes) behind every tenant salt, HMAC-SHA256(secret, tenant); shared by all "
       "frontends. Required with auth.tokens_file; without both, a random secret per process."},
      {"policy.method", T::kString, "none",
       "Default eviction method when a request names none: none (keep all) or a scorer "
       "(glimpse evict --help)."},
      {"policy.budget_ratio", T::kDouble, "0",
       "Default kept fraction in (0, 1] for a scorer; 0 with method none."},
      {"policy.codec", T::kString, "fp16",
       "Default page codec (fp16, bf16, fp8_e4m3, int8, kivi4, kivi2, fp32); also fills a "
       "request's "
       "empty codec."},
      {"limits.max_prompt_tokens", T::kInt, "0",
       "Longest conversation a request may send, in tokens; 0: the model's context - 1."},
      {"limits.default_max_tokens", T::kInt, "256", "Tokens generated when a request says 0."},
      {"limits.max_output_tokens", T::kInt, "4096", "The most tokens a request may ask for."},
      {"limits.max_calls_per_tenant", T::kInt, "64",
       "Generate calls one tenant may have in flight; one more is RESOURCE_EXHAUSTED at once "
       "(0: no limit)."},
      {"limits.max_tool_hint", T::kDuration, "1h",
       "Longest expected_tool_ms / observed_duration_ms accepted (the coordinator's "
       "lease.max_hint)."},
      {"routing.max_queue_wait", T::kDuration, "0s",
       "How long a turn may wait for decode memory (RouteTurn); 0s: the coordinator's default."},
      {"coordinator_timeout", T::kDuration, "10s",
       "Deadline of each coordinator call (RouteTurn adds routing.max_queue_wait); the caller's "
       "deadline, when shorter, wins."},
      {"openai.listen", T::kString, "127.0.0.1:0",
       "host:port of the OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
       "/v1/models; HTTPS with tls.*); empty: none."},
      {"openai.model_name", T::kString, "",
       "The model name /v1/models lists and requests name; empty: the model file's name without "
       ".gguf."},
      {"openai.threads", T::kInt, "16", "HTTP connections served at once."},
      {"openai.max_body_bytes", T::kInt, "4194304", "Largest request body; larger is 413."},
      {"openai.io_timeout", T::kDuration, "30s",
       "A client that stalls sending its request or taking the response this long is dropped."},
  };
  for (ConfigKey& k : ClientTlsKeys("the coordinator and decode workers")) keys.push_back(k);
  return keys;
}

absl::StatusOr<FrontendOptions> OptionsFromConfig(const Config& c) {
  FrontendOptions o;
  o.coordinator_addresses = c.GetStringList("coordinator");
  ASSIGN_OR_RETURN(o.client_tls, ClientTlsFromConfig(c));
  o.coordinator_timeout = c.GetDuration("coordinator_timeout");
  o.max_queue_wait = c.GetDuration("routing.max_queue_wait");
  o.max_tool_hint = c.GetDuration("limits.max_tool_hint");
  if (o.coordinator_timeout <= absl::ZeroDuration() || o.max_queue_wait < absl::ZeroDuration() ||
      o.max_tool_hint < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "coordinator_timeout must be > 0; routing.max_queue_wait and limits.max_tool_hint >= 0");
  }
  o.max_prompt_tokens = c.GetInt("limits.max_prompt_tokens");
  if (o.max_prompt_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("limits.max_prompt_tokens: %d is negative", o.max_prompt_tokens));
  }
  ASSIGN_OR_RETURN(o.default_max_tokens, PositiveInt32(c, "limits.default_max_tokens"));
  ASSIGN_OR_RETURN(o.max_output_tokens, PositiveInt32(c, "limits.max_output_tokens"));
  o.max_calls_per_tenant = c.GetInt("limits.max_calls_per_tenant");
  if (o.max_calls_per_tenant < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("limits.max_calls_per_tenant: %d is negative", o.max_calls_per_tenant));
  }
  o.default_policy.set_method(c.GetString("policy.method"));
  o.default_policy.set_budget_ratio(c.GetDouble("policy.budget_ratio"));
  o.default_policy.set_codec(c.GetString("policy.codec"));
  absl::StatusOr<v1::EvictionPolicy> policy = ResolvePolicy(o.default_policy, "fp16");
  if (!policy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy.*: ", policy.status().message()));
  }
  return o;
}

absl::StatusOr<std::optional<OpenAiServerOptions>> OpenAiOptionsFromConfig(
    const Config& c, const std::string& model_path) {
  const std::string& listen = c.GetString("openai.listen");
  if (listen.empty()) return std::nullopt;
  ASSIGN_OR_RETURN(const HttpServerOptions address, ParseHttpAddress(listen, "openai.listen"));
  OpenAiServerOptions o;
  o.host = address.host;
  o.port = address.port;
  o.model_id = c.GetString("openai.model_name");
  if (o.model_id.empty()) {
    o.model_id = std::filesystem::path(model_path).filename().string();
    if (absl::EndsWith(o.model_id, ".gguf")) o.model_id.resize(o.model_id.size() - 5);
  }
  const int64_t threads = c.GetInt("openai.threads");
  o.max_body_bytes = c.GetInt("openai.max_body_bytes");
  o.io_timeout = c.GetDuration("openai.io_timeout");
  if (threads < 1 || threads > 1024 || o.max_body_bytes < 1024 || o.io_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "openai.threads must be in [1, 1024] (got %d), openai.max_body_bytes >= 1024 (got %d), "
        "openai.io_timeout >= 1s",
        threads, o.max_body_bytes));
  }
  o.threads = static_cast<int>(threads);
  o.tls = {c.GetString("tls.cert"), c.GetString("tls.key"), c.GetString("tls.client_ca"), ""};
  return o;
}

absl::StatusOr<Tenancy> LoadTenancy(const Config& c) {
  Tenancy t;
  const std::string& tokens_file = c.GetString("auth.tokens_file");
  const std::string& secret_file = c.GetString("auth.salt_secret_file");
  if (tokens_file.empty()) {
    t.auth = Authenticator::None();
  } else {
    ASSIGN_OR_RETURN(t.auth, Authenticator::FromFile(tokens_file));
    if (secret_file.empty()) {
      return absl::InvalidArgumentError(
          "auth.salt_secret_file is required with auth.tokens_file: every frontend must derive "
          "the same tenant salts (e.g. openssl rand -hex 32 > salt.secret)");
    }
  }
  if (!secret_file.empty()) {
    ASSIGN_OR_RETURN(t.salt_secret, LoadSaltSecret(secret_file));
    return t;
  }
  ASSIGN_OR_RETURN(t.salt_secret, RandomSaltSecret());
  t.random_secret = true;
  log::Warning(
      "no auth.salt_secret_file: using a random salt secret; stored KV states will not be "
      "reusable after this frontend restarts or from another frontend process");
  return t;
}

}  // namespace glimpse::frontend
