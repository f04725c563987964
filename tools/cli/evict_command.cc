#include "tools/cli/evict_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/profile.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "nlohmann/json.hpp"
#include "tools/cli/args.h"

namespace glimpse::cli {
namespace {

const std::vector<FlagSpec>& EvictFlags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "GGUF model file", false, "the cached default model"},
      {"prompt-file", "file holding the prompt text (required)", false, ""},
      {"chat", "wrap the file's text as a user message in the model's chat template", true, ""},
      {"method", "snapkv, pyramidkv, streamingllm, h2o, lookahead, ... (an eviction method)", false,
       ""},
      {"budget", "kept entries per head: a fraction of the prompt in (0, 1], or a count > 1", false,
       ""},
      {"profile", "eviction profile (glimpse tune) with each method's settings, or none", false,
       "<module>.eviction.json beside --module when it exists"},
      {"window",
       "the scorer's observation window (methods with one), else the always-kept recent window",
       false, "the profile's"},
      {"kernel", "pooling kernel (odd; 1 pools nothing; not for streamingllm)", false,
       "the profile's"},
      {"pooling", "avg or max (not for streamingllm)", false, "the profile's"},
      {"module",
       "LookaheadKV module file (.safetensors); the gates' trained weights and the profile are "
       "read beside it",
       false, "the committed module of the default model"},
      {"weights", "gate weights (.safetensors) for kvzip_gate, trimkv_gate, retention_global",
       false, "<module stem>.<method>.safetensors"},
      {"sinks", "always-kept first entries", false, "the profile's"},
      {"granularity", "head, layer or global", false, "the profile's"},
      {"schedule", "uniform, pyramid or cake", false, "the profile's"},
      {"json", "write the kept positions as JSON to this file (- = stdout)", false, ""},
      {"threads", "worker threads", false, "the number of cores"},
      {"help", "show this help", true, ""},
  };
  return flags;
}

struct EvictOptions {
  std::string model_path;
  std::string prompt_file;
  bool chat = false;
  std::string method;
  double budget = 0.0;  // a ratio in (0, 1] or a whole token count
  std::string profile_path;
  std::string module_path;
  std::string weights_path;
  // Settings given on the command line; the rest come from the profile.
  std::optional<int64_t> window, kernel, sinks;
  std::optional<std::string> pooling;
  std::optional<eviction::Granularity> granularity;
  std::optional<eviction::Schedule> schedule;
  std::string json_path;
  int32_t threads = 0;
};

absl::StatusOr<std::optional<int64_t>> OptionalInt(const Args& args, const std::string& name) {
  if (!args.Has(name)) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t v, args.GetInt(name, 0));
  if (v < 0) return absl::InvalidArgumentError(absl::StrCat("--", name, " must be >= 0, got ", v));
  return std::optional<int64_t>(v);
}

absl::Status ParseSelection(const Args& args, EvictOptions& o) {
  ASSIGN_OR_RETURN(o.budget, args.GetDouble("budget", 0.0));
  if (!(o.budget > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--budget must be > 0, got ", o.budget));
  }
  if (o.budget > 1.0 && o.budget != static_cast<double>(static_cast<int64_t>(o.budget))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--budget above 1 is a token count and must be whole, got ", o.budget));
  }
  ASSIGN_OR_RETURN(o.window, OptionalInt(args, "window"));
  ASSIGN_OR_RETURN(o.kernel, OptionalInt(args, "kernel"));
  ASSIGN_OR_RETURN(o.sinks, OptionalInt(args, "sinks"));
  if (args.Has("pooling")) o.pooling = args.GetString("pooling");
  if (args.Has("granularity")) {
    const std::string g = args.GetString("granularity");
    if (g == "head") {
      o.granularity = eviction::Granularity::kPerHead;
    } else if (g == "layer") {
      o.granularity = eviction::Granularity::kPerLayer;
    } else if (g == "global") {
      o.granularity = eviction::Granularity::kGlobal;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--granularity must be head, layer or global, got '", g, "'"));
    }
  }
  if (args.Has("schedule")) {
    const std::string schedule = args.GetString("schedule");
    if (schedule == "uniform") {
      o.schedule = eviction::Schedule::kUniform;
    } else if (schedule == "pyramid") {
      o.schedule = eviction::Schedule::kPyramid;
    } else if (schedule == "cake") {
      o.schedule = eviction::Schedule::kCake;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--schedule must be uniform, pyramid or cake, got '", schedule, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EvictOptions> ParseOptions(const Args& args) {
  EvictOptions o;
  o.model_path = args.GetString("model");
  o.prompt_file = args.GetString("prompt-file");
  o.chat = args.Has("chat");
  o.method = args.GetString("method");
  o.json_path = args.GetString("json");
  o.profile_path = args.GetString("profile");
  o.module_path = args.GetString("module");
  o.weights_path = args.GetString("weights");
  if (o.prompt_file.empty()) return absl::InvalidArgumentError("--prompt-file is required");
  if (o.method.empty()) return absl::InvalidArgumentError("--method is required");
  if (!args.Has("budget")) return absl::InvalidArgumentError("--budget is required");
  RETURN_IF_ERROR(ParseSelection(args, o));
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0));
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [0, 1024], got ", threads));
  }
  o.threads = static_cast<int32_t>(threads);
  return o;
}

// The method's settings from the profile, with the command line's on top. --window goes to the
// scorer when it has an observation window, else it is the selection's recent window.
absl::StatusOr<eviction::MethodSettings> Settings(const EvictOptions& o,
                                                  const eviction::EvictionProfile& profile,
                                                  std::string_view module) {
  ASSIGN_OR_RETURN(eviction::MethodSettings s, profile.For(o.method));
  if (o.window) (s.scorer.window > 0 ? s.scorer.window : s.recent_window) = *o.window;
  if (o.kernel) s.scorer.kernel = *o.kernel;
  if (o.pooling) s.scorer.pooling = *o.pooling;
  if (o.sinks) s.sinks = *o.sinks;
  if (o.granularity) s.granularity = *o.granularity;
  if (o.schedule) s.schedule = *o.schedule;
  s.scorer.weights_path = o.weights_path;
  RETURN_IF_ERROR(eviction::AttachLearnedFiles(s.scorer, module));
  return s;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --prompt-file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json ToJson(const EvictOptions& o, int64_t n_tokens, const eviction::EvictionResult& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& heads : r.kept_positions) {
    nlohmann::json layer = {{"heads", nlohmann::json::array()}};
    for (const auto& kept : heads) layer["heads"].push_back({{"kept", kept}});
    layers.push_back(std::move(layer));
  }
  return {{"method", o.method},
          {"budget", o.budget},
          {"prompt_tokens", n_tokens},
          {"prefill_ms", r.prefill_seconds * 1e3},
          {"scoring_ms", r.scoring_seconds * 1e3},
          {"layers", std::move(layers)}};
}

absl::Status WriteJson(const std::string& path, const nlohmann::json& doc) {
  if (path == "-") {
    std::cout << doc.dump() << std::endl;
    return absl::OkStatus();
  }
  std::ofstream out(path);
  out << doc.dump() << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write --json ", path));
  return absl::OkStatus();
}

absl::Status Run(const EvictOptions& given) {
  EvictOptions o = given;
  ASSIGN_OR_RETURN(std::string text, ReadFile(o.prompt_file));
  std::string path = o.model_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(path));
  // The default model's learned files (LookaheadKV module, gates, profile) are the committed ones.
  const std::string module = !o.module_path.empty() || !o.model_path.empty()
                                 ? o.module_path
                                 : GLIMPSE_DEFAULT_LOOKAHEAD_MODULE;
  ASSIGN_OR_RETURN(const eviction::EvictionProfile profile,
                   eviction::ResolveProfile(o.profile_path, module, model->fingerprint()));
  ASSIGN_OR_RETURN(const eviction::MethodSettings settings, Settings(o, profile, module));
  ASSIGN_OR_RETURN(std::unique_ptr<eviction::Scorer> scorer,
                   eviction::CreateScorer(settings.scorer));
  const model::Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> prompt =
      tok.Encode(o.chat ? tok.ApplyChatTemplate({{"user", text}}, true) : text);
  eviction::SelectionOptions selection = eviction::SelectionFor(
      settings, scorer->window(), std::min(o.budget, 1.0), static_cast<int64_t>(prompt.size()));
  if (o.budget > 1.0) selection.budget_tokens = static_cast<int64_t>(o.budget);
  kernels::ThreadPool pool(o.threads);
  model::Sequence session(*model, pool);
  ASSIGN_OR_RETURN(eviction::EvictionResult result,
                   eviction::PrefillAndEvict(session, prompt, *scorer, selection));
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (!o.json_path.empty()) RETURN_IF_ERROR(WriteJson(o.json_path, ToJson(o, n, result)));
  const model::ModelConfig& c = model->config();
  const int64_t total = n * c.n_layers * c.n_kv_heads;
  const int64_t kept = session.cache().TotalEntries();
  // The summary goes to stderr when the JSON takes stdout.
  std::FILE* out = o.json_path == "-" ? stderr : stdout;
  std::fprintf(out,
               "%s (%s; profile %s): kept %lld of %lld entries (%.1f %%) over %d layers x %d "
               "kv-heads, prompt %lld tokens\nprefill %.1f ms, scoring %.1f ms (%.1f %% of "
               "prefill)\n",
               o.method.c_str(), eviction::Describe(settings).c_str(), profile.source().c_str(),
               static_cast<long long>(kept), static_cast<long long>(total),
               100.0 * kept / std::max<int64_t>(total, 1), c.n_layers, c.n_kv_heads,
               static_cast<long long>(n), result.prefill_seconds * 1e3,
               result.scoring_seconds * 1e3,
               100.0 * result.scoring_seconds / std::max(result.prefill_seconds, 1e-9));
  return absl::OkStatus();
}

}  // namespace

int EvictCommand(int argc, char** argv) {
  return RunSubcommand<EvictOptions>(
      "evict", "[--model PATH] --prompt-file F --method NAME --budget R [flags]", EvictFlags(),
      argc, argv, &ParseOptions, &Run);
}

}  // namespace glimpse::cli
