#include "tools/cli/tune_command.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/calibration.h"
#include "core/eviction/eval/tune.h"
#include "core/eviction/profile.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "tools/cli/args.h"

namespace glimpse::cli {
namespace {

// Every method that needs no weights file; lookahead joins when a module is given or found.
constexpr char kDefaultMethods[] =
    "snapkv,pyramidkv,streamingllm,h2o,expected_attention,defensivekv,cake";

const std::vector<FlagSpec>& TuneFlags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "GGUF model file", false, "the cached default model"},
      {"module", "LookaheadKV module (.safetensors); adds method lookahead", false,
       "the committed module of the default model"},
      {"methods", "comma-separated policy methods to tune", false,
       absl::StrCat(kDefaultMethods, " (+ lookahead with a module)")},
      {"budgets", "comma-separated kept fractions the objective averages over", false,
       "0.1,0.2,0.3,0.5"},
      {"tasks", "calibration tasks", false, "16"},
      {"sources",
       "comma-separated calibration files or directories, gzip files read decompressed (task i "
       "draws from the i-th modulo their number)",
       false, "/usr/share/common-licenses,/usr/lib/python3.11"},
      {"seed", "seed of the calibration set", false, "1"},
      {"out", "the profile to write", false, "<module>.eviction.json beside --module"},
      {"threads", "worker threads", false, "the number of cores"},
      {"help", "show this help", true, ""},
  };
  return flags;
}

struct TuneCliOptions {
  std::string model_path;
  std::string methods;  // as given ("" = default)
  eviction::eval::TuneOptions tune;
  eviction::eval::CalibrationOptions calibration;
  std::string out;
  int32_t threads = 0;
};

absl::StatusOr<TuneCliOptions> ParseOptions(const Args& args) {
  TuneCliOptions o;
  o.model_path = args.GetString("model");
  o.tune.lookahead_module = args.GetString("module");
  o.methods = args.GetString("methods");
  ASSIGN_OR_RETURN(o.tune.budgets, ParseBudgets(args.GetString("budgets", "0.1,0.2,0.3,0.5")));
  ASSIGN_OR_RETURN(int64_t tasks, args.GetInt("tasks", 16));
  if (tasks < 1 || tasks > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("--tasks must be in [1, 1000], got ", tasks));
  }
  o.calibration.tasks = static_cast<int32_t>(tasks);
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 1));
  if (seed < 0) return absl::InvalidArgumentError(absl::StrCat("--seed must be >= 0, got ", seed));
  o.calibration.seed = static_cast<uint64_t>(seed);
  if (args.Has("sources")) {
    o.calibration.sources = absl::StrSplit(args.GetString("sources"), ',', absl::SkipWhitespace());
  }
  o.out = args.GetString("out");
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0));
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [0, 1024], got ", threads));
  }
  o.threads = static_cast<int32_t>(threads);
  return o;
}

std::string CommandLine(const TuneCliOptions& o) {
  return absl::StrCat("glimpse tune --methods ", absl::StrJoin(o.tune.methods, ","), " --budgets ",
                      absl::StrJoin(o.tune.budgets, ","), " --tasks ", o.calibration.tasks,
                      " --seed ", o.calibration.seed, " --sources ",
                      absl::StrJoin(o.calibration.sources, ","));
}

// The profile document with what tuning measured.
nlohmann::json ProfileDocument(const TuneCliOptions& o,
                               const std::vector<eviction::eval::MethodTuning>& tuned,
                               const std::string& fingerprint, const nlohmann::json& calibration) {
  nlohmann::json doc = eviction::eval::ProfileOf(tuned, fingerprint).ToJson();
  nlohmann::json methods = nlohmann::json::object();
  for (const auto& t : tuned) {
    // Every candidate's KL at each budget, both stages in order (stage 2 starts with stage 1's
    // winner, measured again), so a reader sees what each setting was measured at.
    nlohmann::json measured = nlohmann::json::array();
    for (const auto& c : t.candidates) {
      measured.push_back(
          {{"settings", eviction::Describe(c.settings)}, {"kl_by_budget", c.kl_by_budget}});
    }
    methods[t.method] = {
        {"built_in", eviction::Describe(t.built_in)}, {"built_in_kl", t.built_in_kl},
        {"tuned", eviction::Describe(t.tuned)},       {"tuned_kl", t.tuned_kl},
        {"candidates", t.candidates.size()},          {"measured", std::move(measured)}};
  }
  doc["tuning"] = {
      {"command", CommandLine(o)},
      {"date", Today()},
      {"objective", absl::StrCat("mean KL(full || evicted) over the calibration tasks and the "
                                 "budgets, along the full cache's first ",
                                 o.tune.answer_tokens, " greedy answer tokens (teacher-forced)")},
      {"calibration", calibration},
      {"methods", methods}};
  return doc;
}

absl::Status Run(const TuneCliOptions& given) {
  TuneCliOptions o = given;
  std::string path = o.model_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
    if (o.tune.lookahead_module.empty() &&
        std::filesystem::exists(GLIMPSE_DEFAULT_LOOKAHEAD_MODULE)) {
      o.tune.lookahead_module = GLIMPSE_DEFAULT_LOOKAHEAD_MODULE;
    }
  }
  o.tune.methods =
      absl::StrSplit(o.methods.empty() ? kDefaultMethods : o.methods, ',', absl::SkipWhitespace());
  if (o.methods.empty() && !o.tune.lookahead_module.empty()) o.tune.methods.push_back("lookahead");
  if (o.out.empty()) {
    if (o.tune.lookahead_module.empty()) {
      return absl::InvalidArgumentError("--out is required without a LookaheadKV module");
    }
    o.out = eviction::ProfilePathFor(o.tune.lookahead_module);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(path));
  ASSIGN_OR_RETURN(const eviction::eval::CalibrationSet set,
                   eviction::eval::MakeCalibrationSet(model->tokenizer(), o.calibration));
  kernels::ThreadPool pool(o.threads);
  std::optional<ProgressBar> progress;  // made once Tune knows how many runs there are
  ASSIGN_OR_RETURN(
      const std::vector<eviction::eval::MethodTuning> tuned,
      eviction::eval::Tune(*model, pool, set.tasks, o.tune, [&](int64_t done, int64_t total) {
        if (!progress) progress.emplace("tune runs", total);
        progress->Update(done);
      }));
  if (progress) progress->Done();
  const nlohmann::json doc = ProfileDocument(o, tuned, model->fingerprint(), set.provenance);
  RETURN_IF_ERROR(WriteFile(o.out, doc.dump(1) + "\n"));
  std::printf("# Eviction profile of %s\n\n`%s`, %s, %zu calibration tasks.\n\n%s\nwrote %s\n",
              model->fingerprint().c_str(), CommandLine(o).c_str(), Today().c_str(),
              set.tasks.size(), eviction::eval::TuneTable(tuned).c_str(), o.out.c_str());
  return absl::OkStatus();
}

}  // namespace

int TuneCommand(int argc, char** argv) {
  return RunSubcommand<TuneCliOptions>(
      "tune",
      "[--model PATH] [--module FILE] [--methods LIST] [--budgets LIST] [--tasks N] "
      "[--sources LIST] [--seed S] [--out FILE]",
      TuneFlags(), argc, argv, &ParseOptions, &Run);
}

}  // namespace glimpse::cli
