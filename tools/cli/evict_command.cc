#include "tools/cli/evict_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eviction/pipeline.h"
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
      {"method", "scorer: snapkv, pyramidkv (= snapkv + pyramid), streamingllm, h2o, ...", false,
       ""},
      {"budget", "kept entries per head: a fraction of the prompt in (0, 1], or a count > 1", false,
       ""},
      {"window",
       "the scorer's observation window (methods with one), else the always-kept "
       "recent window",
       false, "the method's default; 32 for selection"},
      {"kernel", "pooling kernel of window scorers", false, "the method's default"},
      {"pooling", "avg or max, for window scorers", false, "the method's default"},
      {"module", "lookahead module file (.safetensors), for --method lookahead", false, ""},
      {"weights", "gate weights (.safetensors) for kvzip_gate, trimkv_gate, retention_global",
       false, ""},
      {"sinks", "always-kept first entries", false, "4"},
      {"granularity", "head, layer or global", false, "head"},
      {"schedule", "uniform, pyramid or cake", false,
       "uniform (pyramid for pyramidkv, cake for cake)"},
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
  std::string method;  // as given (pyramidkv included)
  eviction::ScorerConfig scorer;
  bool has_window = false;
  double budget = 0.0;
  eviction::SelectionOptions selection;
  std::string json_path;
  int32_t threads = 0;
};

absl::Status ParseSelection(const Args& args, EvictOptions& o) {
  ASSIGN_OR_RETURN(o.budget, args.GetDouble("budget", 0.0));
  if (!(o.budget > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--budget must be > 0, got ", o.budget));
  }
  if (o.budget <= 1.0) {
    o.selection.budget_ratio = o.budget;
  } else if (o.budget == static_cast<double>(static_cast<int64_t>(o.budget))) {
    o.selection.budget_tokens = static_cast<int64_t>(o.budget);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--budget above 1 is a token count and must be whole, got ", o.budget));
  }
  ASSIGN_OR_RETURN(o.selection.sinks, args.GetInt("sinks", 4));
  const std::string granularity = args.GetString("granularity", "head");
  if (granularity == "head") {
    o.selection.granularity = eviction::Granularity::kPerHead;
  } else if (granularity == "layer") {
    o.selection.granularity = eviction::Granularity::kPerLayer;
  } else if (granularity == "global") {
    o.selection.granularity = eviction::Granularity::kGlobal;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--granularity must be head, layer or global, got '", granularity, "'"));
  }
  const std::string schedule = args.GetString("schedule", o.method == "pyramidkv" ? "pyramid"
                                                          : o.method == "cake"    ? "cake"
                                                                                  : "uniform");
  if (schedule == "uniform") {
    o.selection.schedule = eviction::Schedule::kUniform;
  } else if (schedule == "pyramid") {
    o.selection.schedule = eviction::Schedule::kPyramid;
  } else if (schedule == "cake") {
    o.selection.schedule = eviction::Schedule::kCake;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--schedule must be uniform, pyramid or cake, got '", schedule, "'"));
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
  if (o.prompt_file.empty()) return absl::InvalidArgumentError("--prompt-file is required");
  if (o.method.empty()) return absl::InvalidArgumentError("--method is required");
  if (!args.Has("budget")) return absl::InvalidArgumentError("--budget is required");
  // PyramidKV is SnapKV's scores under the pyramid schedule.
  o.scorer.method = o.method == "pyramidkv" ? "snapkv" : o.method;
  o.scorer.pooling = args.GetString("pooling");
  o.scorer.weights_path = args.GetString("weights");
  o.scorer.module_path = args.GetString("module");
  ASSIGN_OR_RETURN(o.scorer.kernel, args.GetInt("kernel", 0));
  o.has_window = args.Has("window");
  ASSIGN_OR_RETURN(int64_t window, args.GetInt("window", 0));
  if (o.has_window && window < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--window must be >= 0, got ", window));
  }
  o.selection.window = o.has_window ? window : o.selection.window;
  RETURN_IF_ERROR(ParseSelection(args, o));
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0));
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [0, 1024], got ", threads));
  }
  o.threads = static_cast<int32_t>(threads);
  return o;
}

// The scorer; --window goes to it when the method has an observation window, else it stays the
// selection's recent window (CreateScorer rejects a window for methods without one).
absl::StatusOr<std::unique_ptr<eviction::Scorer>> MakeScorer(const EvictOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<eviction::Scorer> scorer, eviction::CreateScorer(o.scorer));
  if (scorer->window() > 0 && o.has_window) {
    eviction::ScorerConfig config = o.scorer;
    config.window = o.selection.window;
    ASSIGN_OR_RETURN(scorer, eviction::CreateScorer(config));
  }
  return scorer;
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

absl::Status Run(const EvictOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<eviction::Scorer> scorer, MakeScorer(o));
  ASSIGN_OR_RETURN(std::string text, ReadFile(o.prompt_file));
  std::string path = o.model_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(path));
  const model::Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> prompt =
      tok.Encode(o.chat ? tok.ApplyChatTemplate({{"user", text}}, true) : text);
  kernels::ThreadPool pool(o.threads);
  model::Session session(*model, pool);
  ASSIGN_OR_RETURN(eviction::EvictionResult result,
                   eviction::PrefillAndEvict(session, prompt, *scorer, o.selection));
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (!o.json_path.empty()) RETURN_IF_ERROR(WriteJson(o.json_path, ToJson(o, n, result)));
  const model::ModelConfig& c = model->config();
  const int64_t total = n * c.n_layers * c.n_kv_heads;
  const int64_t kept = session.cache().TotalEntries();
  // The summary goes to stderr when the JSON takes stdout.
  std::FILE* out = o.json_path == "-" ? stderr : stdout;
  std::fprintf(out,
               "%s: kept %lld of %lld entries (%.1f %%) over %d layers x %d kv-heads, prompt %lld "
               "tokens\nprefill %.1f ms, scoring %.1f ms (%.1f %% of prefill)\n",
               o.method.c_str(), static_cast<long long>(kept), static_cast<long long>(total),
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
