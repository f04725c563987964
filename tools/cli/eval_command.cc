// The PNG is drawn by tools/plot_eval.py with matplotlib rather than natively: a readable plot
// needs axes, tick labels, a legend and anti-aliased lines, i.e. a font and a rasteriser that the
// C++ tree does not have, while the plot is a report artifact and not part of any service. The
// table and JSON never depend on Python; a missing python3-matplotlib only costs the PNG (with a
// warning naming the command to run).
#include "tools/cli/eval_command.h"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/eviction/eval/long_generation.h"
#include "core/eviction/eval/recall_eval.h"
#include "core/eviction/eval/report.h"
#include "core/eviction/eval/runner.h"
#include "core/eviction/eval/tasks.h"
#include "core/eviction/profile.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "tools/cli/args.h"
#include "tools/cli/eval_cluster.h"

namespace glimpse::cli {
namespace {

constexpr char kDefaultMethods[] = "snapkv,streamingllm,h2o,pyramidkv,expected_attention";
constexpr char kDefaultBudgets[] = "0.1,0.2,0.3,0.5";
constexpr int64_t kDefaultTasksPerKind = 6;
// Methods decode-time eviction can run (decode_eviction.h).
constexpr char kDefaultDecodeMethods[] = "snapkv,pyramidkv,streamingllm";

const std::vector<FlagSpec>& EvalFlags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "GGUF model file", false, "the cached default model"},
      {"methods",
       "comma-separated scorers (pyramidkv = snapkv + pyramid schedule; laq = snapkv, then 8 "
       "draft tokens rescore; lookahead needs --module)",
       false, kDefaultMethods},
      {"module",
       "LookaheadKV module (.safetensors) for method lookahead; the gates' trained weights and the "
       "profile are read beside it",
       false, "the committed module of the default model"},
      {"profile",
       "eviction profile (glimpse tune) giving each method's settings, or none for the built-in "
       "ones",
       false, "<module>.eviction.json beside --module when it exists"},
      {"budgets", "comma-separated kept fractions of the prompt, each in (0, 1]", false,
       kDefaultBudgets},
      {"tasks", "tasks per family (lengths cycle 512/1024/1536/2048 tokens)", false,
       absl::StrCat(kDefaultTasksPerKind)},
      {"families",
       "comma-separated task families (needle_single, needle_multi, variable_tracking, "
       "two_turn_qa, name_glossary, name_quotes, phrase_glossary, names_two_turn)",
       false, "all"},
      {"quick", "one 512-token task per kind (a smoke run); overrides --tasks", true, ""},
      {"cluster",
       "also serve every task through a local cluster (prefill worker, UCX, decode worker) and "
       "report its accuracy beside the in-process one",
       true, ""},
      {"recall",
       "run the multi-turn recall task instead: the two-turn families of --families "
       "(two_turn_qa, names_two_turn) with turn 2 prefilled over the evicted cache, without and "
       "with cold-page recall (--methods defaults to snapkv); writes recall.md",
       true, ""},
      {"long-generation",
       "run the long-generation family instead: each task's text retold in a long trace (turn 1) "
       "with decode-time eviction every --interval tokens to each of --decode-budgets entries per "
       "head, then the question (turn 2); --methods defaults to snapkv,pyramidkv,streamingllm; "
       "writes long_generation.md",
       true, ""},
      {"decode-budgets", "with --long-generation: comma-separated entries kept per head", false,
       "128,256,512"},
      {"interval", "with --long-generation: fed tokens between evictions", false, "32"},
      {"trace-tokens", "with --long-generation: turn 1's trace, at most", false, "256"},
      {"export",
       "also write the tasks as token ids with their expected answers to this JSON file (for "
       "tools/oracle/kvpress_eval.py)",
       false, ""},
      {"seed", "seed of the task generator", false, "1"},
      {"out", "directory for eval.md, eval.json and eval.png", false, "eval-out"},
      {"threads", "worker threads", false, "the number of cores"},
      {"help", "show this help", true, ""},
  };
  return flags;
}

struct EvalOptions {
  std::string model_path;
  std::vector<std::string> methods;
  std::string profile_path;        // as given ("" = beside the module, "none")
  eviction::eval::RunOptions run;  // arms made in Run() from methods and the profile
  eviction::eval::SuiteOptions suite;
  bool quick = false;
  bool recall = false;
  bool long_generation = false;
  eviction::eval::LongGenerationOptions long_run;  // arms made in Run()
  bool cluster = false;
  std::string export_path;
  std::string out_dir;
  int32_t threads = 0;
};

absl::StatusOr<EvalOptions> ParseOptions(const Args& args) {
  EvalOptions o;
  o.model_path = args.GetString("model");
  o.recall = args.Has("recall");
  o.long_generation = args.Has("long-generation");
  if (o.recall && o.long_generation) {
    return absl::InvalidArgumentError("--recall and --long-generation are separate runs");
  }
  const char* default_methods =
      o.recall ? "snapkv" : (o.long_generation ? kDefaultDecodeMethods : kDefaultMethods);
  o.methods =
      absl::StrSplit(args.GetString("methods", default_methods), ',', absl::SkipWhitespace());
  o.long_run.budgets.clear();
  for (absl::string_view b : absl::StrSplit(args.GetString("decode-budgets", "128,256,512"), ',',
                                            absl::SkipWhitespace())) {
    int64_t budget = 0;
    if (!absl::SimpleAtoi(b, &budget) || budget < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--decode-budgets: '", std::string(b), "' is not a count >= 1"));
    }
    o.long_run.budgets.push_back(budget);
  }
  if (o.long_run.budgets.empty()) return absl::InvalidArgumentError("--decode-budgets names none");
  ASSIGN_OR_RETURN(o.long_run.interval, args.GetInt("interval", 32));
  ASSIGN_OR_RETURN(int64_t trace_tokens, args.GetInt("trace-tokens", 256));
  if (o.long_run.interval < 1 || trace_tokens < 1 || trace_tokens > 4096) {
    return absl::InvalidArgumentError("--interval must be >= 1 and --trace-tokens in [1, 4096]");
  }
  o.long_run.trace_tokens = static_cast<int32_t>(trace_tokens);
  if (o.methods.empty()) return absl::InvalidArgumentError("--methods names no method");
  ASSIGN_OR_RETURN(o.run.budgets, ParseBudgets(args.GetString("budgets", kDefaultBudgets)));
  o.run.lookahead_module = args.GetString("module");
  o.profile_path = args.GetString("profile");
  ASSIGN_OR_RETURN(int64_t tasks, args.GetInt("tasks", kDefaultTasksPerKind));
  if (tasks < 1 || tasks > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("--tasks must be in [1, 1000], got ", tasks));
  }
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 1));
  if (seed < 0) return absl::InvalidArgumentError(absl::StrCat("--seed must be >= 0, got ", seed));
  o.quick = args.Has("quick");
  o.cluster = args.Has("cluster");
  o.export_path = args.GetString("export");
  if (o.cluster && (o.recall || o.long_generation ||
                    std::find(o.methods.begin(), o.methods.end(), "laq") != o.methods.end())) {
    return absl::InvalidArgumentError(
        "--cluster serves policy methods: no --recall, no --long-generation, no laq");
  }
  if (o.quick) {
    o.suite = eviction::eval::QuickSuiteOptions(static_cast<uint64_t>(seed));
  } else {
    o.suite.tasks_per_kind = static_cast<int32_t>(tasks);
    o.suite.seed = static_cast<uint64_t>(seed);
  }
  if (args.Has("families")) {
    o.suite.kinds.clear();
    for (absl::string_view name :
         absl::StrSplit(args.GetString("families"), ',', absl::SkipWhitespace())) {
      const std::vector<eviction::eval::TaskKind> all = eviction::eval::AllTaskKinds();
      auto it = std::find_if(all.begin(), all.end(), [&](eviction::eval::TaskKind k) {
        return eviction::eval::TaskKindName(k) == std::string_view(name.data(), name.size());
      });
      if (it == all.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--families: unknown family '", std::string(name), "'"));
      }
      o.suite.kinds.push_back(*it);
    }
    if (o.suite.kinds.empty()) return absl::InvalidArgumentError("--families names none");
  }
  o.out_dir = args.GetString("out", "eval-out");
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0));
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [0, 1024], got ", threads));
  }
  o.threads = static_cast<int32_t>(threads);
  return o;
}

std::string Families(const EvalOptions& o) {
  std::vector<std::string> names;
  for (eviction::eval::TaskKind k : o.suite.kinds) {
    names.emplace_back(eviction::eval::TaskKindName(k));
  }
  return absl::StrJoin(names, ",");
}

// The command line that reproduces a run.
std::string CommandLine(const EvalOptions& o) {
  return absl::StrCat(
      "glimpse eval", o.recall ? " --recall" : "",
      o.long_generation
          ? absl::StrCat(" --long-generation --decode-budgets ",
                         absl::StrJoin(o.long_run.budgets, ","), " --interval ",
                         o.long_run.interval, " --trace-tokens ", o.long_run.trace_tokens)
          : "",
      o.cluster ? " --cluster" : "",
      o.quick ? " --quick" : absl::StrCat(" --tasks ", o.suite.tasks_per_kind),
      o.suite.kinds == eviction::eval::AllTaskKinds() ? ""
                                                      : absl::StrCat(" --families ", Families(o)),
      " --seed ", o.suite.seed, " --methods ", absl::StrJoin(o.methods, ","),
      o.long_generation ? "" : absl::StrCat(" --budgets ", absl::StrJoin(o.run.budgets, ",")),
      o.run.lookahead_module.empty() ? "" : absl::StrCat(" --module ", o.run.lookahead_module),
      o.profile_path.empty() ? "" : absl::StrCat(" --profile ", o.profile_path));
}

// Each arm's settings, one markdown bullet per method.
std::string SettingsList(const std::vector<eviction::eval::Arm>& arms) {
  std::string out;
  for (const eviction::eval::Arm& arm : arms) {
    absl::StrAppend(&out, "- ", arm.label, ": ", eviction::Describe(arm.settings),
                    arm.laq ? " (stage 1; 8 draft tokens rescore)" : "", "\n");
  }
  return out;
}

// The markdown report: what was run, the table, and what the columns mean.
std::string Markdown(const EvalOptions& o, const model::Model& model, const std::string& profile,
                     const std::vector<eviction::eval::TaskScores>& tasks,
                     const std::vector<eviction::eval::ReportRow>& rows) {
  double tokens = 0.0, prefill = 0.0;
  for (const auto& t : tasks) {
    tokens += static_cast<double>(t.prompt_tokens);
    prefill += t.prefill_seconds;
  }
  const double n = static_cast<double>(std::max<size_t>(tasks.size(), 1));
  return absl::StrFormat(
      "# Eviction quality\n\n"
      "`%s`, %s, model fingerprint %s.\n"
      "%d tasks (%d per kind), prompts of %.0f tokens on average, plain prefill %.2f s on "
      "average. Settings (eviction profile: %s):\n\n%s\n%s\n"
      "accuracy: the last turn's answer contains the expected number, name or phrase (whole "
      "words). retained: of the tasks the full cache answers, the share this row answers too. "
      "agreement: fraction of the "
      "first %d greedy answer tokens equal to the full cache's, position by position. KL: mean "
      "KL(full || evicted) of next-token distributions with the full cache's answers "
      "teacher-forced "
      "(nats). scoring overhead: the method's scoring + selection + cache compaction as a "
      "percentage of a plain prefill (capture of the inputs a method needs, e.g. H2O's accumulated "
      "attention, happens during the prefill and is not counted).\n",
      CommandLine(o), Today(), model.fingerprint(), tasks.size(), o.suite.tasks_per_kind,
      tokens / n, prefill / n, profile, SettingsList(o.run.arms),
      eviction::eval::MarkdownTable(rows), o.run.max_answer_tokens);
}

// Runs tools/plot_eval.py (GLIMPSE_PLOT_SCRIPT overrides its path); false when it failed.
bool Plot(const std::filesystem::path& json, const std::filesystem::path& png) {
  const char* script_env = std::getenv("GLIMPSE_PLOT_SCRIPT");
  const std::string script = script_env != nullptr && *script_env != '\0'
                                 ? script_env
                                 : absl::StrCat(GLIMPSE_SOURCE_DIR, "/tools/plot_eval.py");
  // Debian's python3-matplotlib belongs to /usr/bin/python3, which a pyenv or venv `python3` on
  // PATH would hide; GLIMPSE_PYTHON overrides.
  const char* python_env = std::getenv("GLIMPSE_PYTHON");
  const std::string python = python_env != nullptr && *python_env != '\0'  ? python_env
                             : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                                           : "python3";
  const std::string command =
      absl::StrCat(python, " '", script, "' '", json.string(), "' '", png.string(), "' 1>&2");
  const int rc = std::system(command.c_str());
  if (rc == 0) return true;
  std::fprintf(stderr,
               "glimpse eval: warning: %s was not written (`%s` exited %d); install "
               "python3-matplotlib (tools/setup/install_deps.sh) and run it again\n",
               png.string().c_str(), command.c_str(), WEXITSTATUS(rc));
  return false;
}

// The tasks as another engine runs them (runner.h TaskScores' evicted_prompt, fed_before_answer).
nlohmann::json ExportJson(const EvalOptions& o, const model::Model& model,
                          const std::vector<eviction::eval::Task>& suite,
                          const std::vector<eviction::eval::TaskScores>& tasks) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < tasks.size(); ++i) {
    out.push_back({{"kind", std::string(eviction::eval::TaskKindName(tasks[i].kind))},
                   {"seed", tasks[i].seed},
                   {"evicted_prompt", tasks[i].evicted_prompt},
                   {"fed_before_answer", tasks[i].fed_before_answer},
                   {"expected", suite[i].turns.back().answer},
                   {"full_answer", tasks[i].full.answer}});
  }
  return {{"command", CommandLine(o)},
          {"model", model.fingerprint()},
          {"max_answer_tokens", o.run.max_answer_tokens},
          {"tasks", std::move(out)}};
}

// The tasks of --families that are among `allowed`; InvalidArgument naming `flag` and the
// allowed families when --families names none of them.
absl::StatusOr<std::vector<eviction::eval::Task>> TasksOf(
    const EvalOptions& o, const std::vector<eviction::eval::TaskKind>& allowed,
    const std::string& flag) {
  eviction::eval::SuiteOptions suite = o.suite;
  std::erase_if(suite.kinds, [&](eviction::eval::TaskKind k) {
    return std::find(allowed.begin(), allowed.end(), k) == allowed.end();
  });
  if (suite.kinds.empty()) {
    std::vector<std::string> names;
    for (eviction::eval::TaskKind k : allowed) {
      names.emplace_back(eviction::eval::TaskKindName(k));
    }
    return absl::InvalidArgumentError(absl::StrCat(flag, " runs the families ",
                                                   absl::StrJoin(names, ", "),
                                                   "; --families names none of them"));
  }
  return eviction::eval::GenerateSuite(suite);
}

// Writes `markdown` to out_dir/name (creating out_dir) and prints it.
absl::Status WriteReport(const std::string& out_dir, const std::string& name,
                         const std::string& markdown) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create --out ", out_dir, ": ", ec.message()));
  }
  const std::filesystem::path file = std::filesystem::path(out_dir) / name;
  RETURN_IF_ERROR(WriteFile(file.string(), markdown));
  std::printf("%s\nwrote %s\n", markdown.c_str(), file.string().c_str());
  return absl::OkStatus();
}

// The multi-turn recall task (recall_eval.h) on the suite's two-turn families, per method.
absl::Status RunRecall(const EvalOptions& o, const model::Model& model, kernels::ThreadPool& pool) {
  using eviction::eval::TaskKind;
  const std::vector<TaskKind> two_turn = {TaskKind::kTwoTurnQa, TaskKind::kNamesTwoTurn};
  ASSIGN_OR_RETURN(const std::vector<eviction::eval::Task> suite, TasksOf(o, two_turn, "--recall"));
  ProgressBar progress("recall eval", static_cast<int64_t>(suite.size() * o.run.arms.size()));
  int64_t done = 0;
  std::string markdown =
      absl::StrFormat("# Cold-page recall\n\n`%s`, %s, model fingerprint %s.\n\n%s", CommandLine(o),
                      Today(), model.fingerprint(), SettingsList(o.run.arms));
  for (const eviction::eval::Arm& arm : o.run.arms) {
    eviction::eval::RecallEvalOptions options;
    options.settings = arm.settings;
    options.budgets = o.run.budgets;
    options.lookahead_module = o.run.lookahead_module;
    absl::StrAppend(&markdown, "\n## ", arm.label, "\n");
    for (TaskKind kind : two_turn) {
      std::vector<eviction::eval::RecallTaskScores> scores;
      for (const eviction::eval::Task& task : suite) {
        if (task.kind != kind) continue;
        ASSIGN_OR_RETURN(eviction::eval::RecallTaskScores s,
                         eviction::eval::RunRecallTask(model, pool, task, options));
        scores.push_back(std::move(s));
        progress.Update(++done);
      }
      if (scores.empty()) continue;  // a family --families left out
      absl::StrAppend(&markdown, "\n",
                      eviction::eval::RecallReport(eviction::eval::TaskKindName(kind), scores));
    }
  }
  progress.Done();
  return WriteReport(o.out_dir, "recall.md", markdown);
}

// The long-generation family (long_generation.h) on the suite's single-turn kinds, every arm and
// budget on each task.
absl::Status RunLongGeneration(EvalOptions& o, const model::Model& model,
                               kernels::ThreadPool& pool) {
  ASSIGN_OR_RETURN(const std::vector<eviction::eval::Task> suite,
                   TasksOf(o, eviction::eval::LongGenerationSourceKinds(), "--long-generation"));
  o.long_run.arms = o.run.arms;
  o.long_run.lookahead_module = o.run.lookahead_module;
  ProgressBar progress(
      "long-generation eval",
      static_cast<int64_t>(suite.size()) *
          (1 + static_cast<int64_t>(o.long_run.arms.size() * o.long_run.budgets.size())));
  int64_t done = 0;
  std::vector<eviction::eval::LongGenerationTask> tasks;
  for (const eviction::eval::Task& task : suite) {
    ASSIGN_OR_RETURN(eviction::eval::LongGenerationTask t,
                     eviction::eval::RunLongGenerationTask(model, pool, task, o.long_run,
                                                           [&] { progress.Update(++done); }));
    tasks.push_back(std::move(t));
  }
  progress.Done();
  const std::string markdown = absl::StrFormat(
      "# Decode-time eviction: the long-generation family\n\n`%s`, %s, model fingerprint %s.\n\n"
      "%s\n%s",
      CommandLine(o), Today(), model.fingerprint(), SettingsList(o.run.arms),
      eviction::eval::LongGenerationReport(tasks, o.long_run));
  return WriteReport(o.out_dir, "long_generation.md", markdown);
}

absl::Status Run(const EvalOptions& given) {
  EvalOptions o = given;  // completed with the module, the profile's arms
  std::string path = o.model_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
    if (o.run.lookahead_module.empty() &&
        std::filesystem::exists(GLIMPSE_DEFAULT_LOOKAHEAD_MODULE)) {
      o.run.lookahead_module = GLIMPSE_DEFAULT_LOOKAHEAD_MODULE;
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(path));
  ASSIGN_OR_RETURN(
      const eviction::EvictionProfile profile,
      eviction::ResolveProfile(o.profile_path, o.run.lookahead_module, model->fingerprint()));
  ASSIGN_OR_RETURN(o.run.arms, eviction::eval::ArmsFor(o.methods, profile));
  RETURN_IF_ERROR(eviction::eval::ValidateRunOptions(o.run));
  kernels::ThreadPool pool(o.threads);
  if (o.recall) return RunRecall(o, *model, pool);
  if (o.long_generation) return RunLongGeneration(o, *model, pool);
  ASSIGN_OR_RETURN(const std::vector<eviction::eval::Task> suite,
                   eviction::eval::GenerateSuite(o.suite));
  const int64_t runs_per_task =
      (o.cluster ? 2 : 1) * (1 + static_cast<int64_t>(o.run.arms.size() * o.run.budgets.size()));
  std::unique_ptr<ClusterEval> cluster;
  if (o.cluster) {
    LocalClusterOptions c;
    c.dir = (std::filesystem::path(o.out_dir) / "cluster").string();
    c.model = o.model_path;
    c.lookahead_module = o.run.lookahead_module;
    c.eviction_profile = profile.source() == "built-in" ? "none" : profile.source();
    ASSIGN_OR_RETURN(cluster, ClusterEval::Start(c));
  }
  ProgressBar progress("eval", static_cast<int64_t>(suite.size()) * runs_per_task);
  int64_t done = 0;
  std::vector<eviction::eval::TaskScores> tasks;
  std::vector<std::vector<ClusterRun>> served;
  for (size_t i = 0; i < suite.size(); ++i) {
    ASSIGN_OR_RETURN(
        eviction::eval::TaskScores scores,
        eviction::eval::RunTask(*model, pool, suite[i], o.run, [&] { progress.Update(++done); }));
    if (cluster) {
      ASSIGN_OR_RETURN(
          std::vector<ClusterRun> runs,
          cluster->Serve(model->tokenizer(), suite[i], scores, o.run, static_cast<int64_t>(i)));
      done += static_cast<int64_t>(runs.size());
      progress.Update(done);
      served.push_back(std::move(runs));
    }
    tasks.push_back(std::move(scores));
  }
  progress.Done();
  cluster.reset();
  const std::vector<eviction::eval::ReportRow> rows = eviction::eval::Aggregate(tasks, o.run);
  const std::filesystem::path dir(o.out_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create --out ", o.out_dir, ": ", ec.message()));
  std::string markdown = Markdown(o, *model, profile.source(), tasks, rows);
  if (!served.empty()) {
    absl::StrAppend(&markdown,
                    "\n## Through the cluster\n\nThe same tasks served by a local cluster "
                    "(prefill worker, fp16 pages over UCX, decode worker; tools/cli/eval_cluster.h)"
                    ":\n\n",
                    ClusterTable(served));
  }
  RETURN_IF_ERROR(WriteFile((dir / "eval.md").string(), markdown));
  nlohmann::json doc = eviction::eval::ReportJson(rows, tasks);
  doc["model"] = model->fingerprint();
  doc["seed"] = o.suite.seed;
  doc["tasks_per_kind"] = o.suite.tasks_per_kind;
  doc["date"] = Today();
  doc["command"] = CommandLine(o);
  doc["profile"] = profile.source();
  RETURN_IF_ERROR(WriteFile((dir / "eval.json").string(), doc.dump(1) + "\n"));
  if (!o.export_path.empty()) {
    RETURN_IF_ERROR(WriteFile(o.export_path, ExportJson(o, *model, suite, tasks).dump() + "\n"));
  }
  const bool plotted = Plot(dir / "eval.json", dir / "eval.png");
  const std::string written =
      absl::StrCat((dir / "eval.md").string(), ", ", (dir / "eval.json").string(),
                   plotted ? absl::StrCat(", ", (dir / "eval.png").string()) : "");
  std::printf("%s\nwrote %s\n", markdown.c_str(), written.c_str());
  return absl::OkStatus();
}

}  // namespace

int EvalCommand(int argc, char** argv) {
  return RunSubcommand<EvalOptions>(
      "eval",
      "[--model PATH] [--methods LIST] [--budgets LIST] [--module FILE] [--profile FILE|none] "
      "[--families LIST] [--tasks N] [--quick] [--recall] [--long-generation] [--cluster] [--seed "
      "S] "
      "[--out DIR]",
      EvalFlags(), argc, argv, &ParseOptions, &Run);
}

}  // namespace glimpse::cli
