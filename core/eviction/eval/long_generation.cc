#include "core/eviction/eval/long_generation.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/common/stopwatch.h"
#include "core/eviction/decode_eviction.h"
#include "core/eviction/eval/metrics.h"
#include "core/eviction/pipeline.h"
#include "core/eviction/profile.h"
#include "core/eviction/recall.h"
#include "core/model/generator.h"

namespace glimpse::eviction::eval {
namespace {

constexpr char kRetell[] =
    "Before my question, retell the text above in your own words, in detail, in at least 200 "
    "words.";

// The reference: what the full cache generates and answers, and its next-token log-probabilities
// at every trace step.
struct Reference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> trace;  // generated tokens, the end-of-generation token included if any
  bool ended = false;          // the trace ends with an end-of-generation token
  std::vector<std::vector<float>> log_probs;  // [step][vocab] before trace[step] is fed
  int64_t peak_entries = 0;
  double trace_seconds = 0.0;
};

int64_t MostEntries(const model::KvCache& cache) {
  int64_t most = 0;
  for (int32_t l = 0; l < cache.n_layers(); ++l) {
    for (int32_t h = 0; h < cache.n_kv_heads(); ++h) most = std::max(most, cache.size(l, h));
  }
  return most;
}

// Turn 2's rows after the trace.
std::vector<int32_t> TurnTwoRows(const model::Tokenizer& tok, const Task& task, bool ended) {
  return tok.Encode(absl::StrCat(ended ? "\n" : "<|im_end|>\n", "<|im_start|>user\n",
                                 task.turns.back().question,
                                 "<|im_end|>\n<|im_start|>assistant\n"));
}

// The greedy answer from `logits` on (model::DecodeFrom: at most max_tokens, without a final
// end-of-generation token), as text.
absl::StatusOr<std::string> GreedyAnswer(model::Sequence& session, std::vector<float> logits,
                                         int32_t max_tokens) {
  ASSIGN_OR_RETURN(model::Sampler greedy, model::Sampler::Create({}));
  ASSIGN_OR_RETURN(const model::GenerationResult answer,
                   model::DecodeFrom(session, greedy, std::move(logits), max_tokens, {}));
  return DecodeAnswer(session.model().tokenizer(), answer.tokens);
}

// Turn 2 fed whole over what the session holds, answered greedily.
absl::StatusOr<std::string> AnswerTurnTwo(model::Sequence& session, const Task& task, bool ended,
                                          int32_t max_tokens) {
  ASSIGN_OR_RETURN(std::vector<float> logits,
                   session.Forward(TurnTwoRows(session.model().tokenizer(), task, ended)));
  return GreedyAnswer(session, std::move(logits), max_tokens);
}

// Turn 2 as a worker runs the next turn: its rows but the last prefilled with eviction at the
// budget, offered the cold entries as recall candidates (half the budget per head, pages of 16),
// then the last row fed and the answer decoded.
absl::StatusOr<std::string> AnswerTurnTwoWithRecall(model::Sequence& session, const Task& task,
                                                    bool ended, const Scorer& scorer,
                                                    const SelectionOptions& selection,
                                                    std::span<const model::KvHead> cold,
                                                    int32_t max_tokens) {
  const std::vector<int32_t> rows = TurnTwoRows(session.model().tokenizer(), task, ended);
  const RecallRequest recall{
      .cold = cold, .candidate_tokens = (selection.budget_tokens + 1) / 2, .page_tokens = 16};
  RETURN_IF_ERROR(
      PrefillAndEvict(session, std::span(rows).first(rows.size() - 1), scorer, selection, &recall)
          .status());
  ASSIGN_OR_RETURN(std::vector<float> logits, session.Forward(std::span(rows).last(1)));
  return GreedyAnswer(session, std::move(logits), max_tokens);
}

// Adds an eviction's evicted entries to the cold tier (one KvHead per layer · Hkv + head).
void AddToCold(std::vector<model::KvHead>& cold, const EvictionResult& eviction) {
  for (size_t l = 0; l < eviction.evicted.size(); ++l) {
    const size_t hkv = eviction.evicted[l].size();
    for (size_t h = 0; h < hkv; ++h) AddMissingEntries(cold[l * hkv + h], eviction.evicted[l][h]);
  }
}

absl::StatusOr<Reference> RunReference(model::Sequence& session, const Task& task,
                                       const LongGenerationOptions& options) {
  const model::Tokenizer& tok = session.model().tokenizer();
  Reference ref;
  ref.prompt = tok.Encode(
      tok.ApplyChatTemplate({{"user", absl::StrCat(task.context, "\n\n", kRetell)}}, true));
  ASSIGN_OR_RETURN(std::vector<float> logits, session.Forward(ref.prompt));
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int32_t>(ref.trace.size()) < options.trace_tokens) {
    const std::vector<double> lp = LogSoftmax(logits);
    ref.log_probs.emplace_back(lp.begin(), lp.end());
    const int32_t token = Argmax(logits);
    ref.trace.push_back(token);
    const int32_t next[] = {token};
    ASSIGN_OR_RETURN(logits, session.Forward(next));
    if (tok.IsEndOfGeneration(token)) {
      ref.ended = true;
      break;
    }
  }
  ref.trace_seconds = SecondsSince(start);
  ref.peak_entries = MostEntries(session.cache());
  return ref;
}

// One arm at one budget: the prompt, the reference trace teacher-forced with decode-time eviction,
// then turn 2.
absl::StatusOr<LongGenerationRun> RunArm(const model::Model& model, kernels::ThreadPool& pool,
                                         const Task& task, const Reference& ref, const Arm& arm,
                                         const Scorer& scorer, int64_t budget,
                                         const LongGenerationOptions& options) {
  LongGenerationRun run{.label = arm.label, .budget = budget};
  model::Sequence session(model, pool);
  // Everything evicted, the prompt's and the trace's: the cold tier turn 2 may recall from.
  std::vector<model::KvHead> cold(int64_t{model.config().n_layers} * model.config().n_kv_heads);
  DecodeEvictionOptions decode = DecodeEvictionFor(arm.settings, budget, options.interval);
  decode.on_evicted = [&cold](EvictionResult&& e) { AddToCold(cold, e); };
  ASSIGN_OR_RETURN(std::unique_ptr<DecodeEviction> eviction,
                   DecodeEviction::Create(session.model(), scorer, decode));
  // The prompt is evicted to the same budget as it is prefilled, so the session never holds more
  // than budget + interval entries per head.
  SelectionOptions prompt_selection = decode.selection;
  prompt_selection.budget_tokens = budget;
  ASSIGN_OR_RETURN(EvictionResult prefill,
                   PrefillAndEvict(session, ref.prompt, scorer, prompt_selection));
  AddToCold(cold, prefill);
  std::vector<float> logits = std::move(prefill.last_logits);
  run.peak_entries = MostEntries(session.cache());
  double kl = 0.0;
  int64_t agree = 0;
  for (size_t i = 0; i < ref.trace.size(); ++i) {
    const std::vector<double> lp = LogSoftmax(logits);
    const std::vector<double> full(ref.log_probs[i].begin(), ref.log_probs[i].end());
    kl += KlDivergence(full, lp);
    agree += Argmax(logits) == ref.trace[i] ? 1 : 0;
    const int32_t next[] = {ref.trace[i]};
    ASSIGN_OR_RETURN(logits, session.Forward(next, /*all_logits=*/false, eviction.get()));
    run.peak_entries = std::max(run.peak_entries, MostEntries(session.cache()));
    RETURN_IF_ERROR(eviction->AfterToken(session));
  }
  const double steps = static_cast<double>(std::max<size_t>(ref.trace.size(), 1));
  run.kl = kl / steps;
  run.agreement = static_cast<double>(agree) / steps;
  run.evictions = eviction->stats().evictions;
  run.eviction_seconds = eviction->stats().seconds;
  // Turn 2 twice, from the same cache: fed whole, and as a worker's next turn with recall.
  model::Sequence plain(model, pool);
  ASSIGN_OR_RETURN(plain.cache(), session.cache().Clone());
  RETURN_IF_ERROR(plain.Resume(session.next_position()));
  ASSIGN_OR_RETURN(run.answer, AnswerTurnTwo(plain, task, ref.ended, options.max_answer_tokens));
  run.correct = AnswerMatches(run.answer, task.turns.back().answer);
  // H2O scores by attention that cold entries never received: it cannot recall (pipeline.h).
  run.recall_run = (scorer.needs() & kAccumulatedAttention) == 0;
  if (!run.recall_run) return run;
  ASSIGN_OR_RETURN(run.recall_answer,
                   AnswerTurnTwoWithRecall(session, task, ref.ended, scorer, prompt_selection, cold,
                                           options.max_answer_tokens));
  run.recall_correct = AnswerMatches(run.recall_answer, task.turns.back().answer);
  return run;
}

absl::Status CheckOptions(const Task& task, const LongGenerationOptions& options) {
  if (task.turns.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a long-generation task is made from a "
                     "single-turn task; ",
                     std::string(TaskKindName(task.kind)), " has ", task.turns.size(), " turns"));
  }
  if (options.arms.empty()) return absl::InvalidArgumentError("no methods to evaluate");
  for (const Arm& arm : options.arms) {
    if (arm.laq) return absl::InvalidArgumentError("laq does not evict during decoding");
  }
  for (int64_t b : options.budgets) {
    if (b < 1) return absl::InvalidArgumentError(absl::StrCat("budget ", b, " is below 1 entry"));
  }
  if (options.budgets.empty()) return absl::InvalidArgumentError("no budgets");
  if (options.interval < 1 || options.trace_tokens < 1) {
    return absl::InvalidArgumentError("interval and trace tokens must be >= 1");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<TaskKind> LongGenerationSourceKinds() {
  return {TaskKind::kNeedleSingle, TaskKind::kNeedleMulti, TaskKind::kNameInGlossary,
          TaskKind::kPhraseInGlossary};
}

absl::StatusOr<LongGenerationTask> RunLongGenerationTask(const model::Model& model,
                                                         kernels::ThreadPool& pool,
                                                         const Task& task,
                                                         const LongGenerationOptions& options,
                                                         const std::function<void()>& on_run) {
  RETURN_IF_ERROR(CheckOptions(task, options));
  std::vector<std::unique_ptr<Scorer>> scorers;
  for (const Arm& arm : options.arms) {
    ScorerConfig config = arm.settings.scorer;
    RETURN_IF_ERROR(AttachLearnedFiles(config, options.lookahead_module));
    ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, CreateScorer(config));
    scorers.push_back(std::move(scorer));
  }
  LongGenerationTask out{.kind = task.kind, .seed = task.seed};
  model::Sequence full(model, pool);
  ASSIGN_OR_RETURN(const Reference ref, RunReference(full, task, options));
  ASSIGN_OR_RETURN(out.full_answer,
                   AnswerTurnTwo(full, task, ref.ended, options.max_answer_tokens));
  out.full_correct = AnswerMatches(out.full_answer, task.turns.back().answer);
  out.prompt_tokens = static_cast<int64_t>(ref.prompt.size());
  out.trace_tokens = static_cast<int64_t>(ref.trace.size());
  out.full_peak_entries = ref.peak_entries;
  out.trace_seconds = ref.trace_seconds;
  if (on_run) on_run();
  for (size_t a = 0; a < options.arms.size(); ++a) {
    for (int64_t budget : options.budgets) {
      ASSIGN_OR_RETURN(LongGenerationRun run, RunArm(model, pool, task, ref, options.arms[a],
                                                     *scorers[a], budget, options));
      out.runs.push_back(std::move(run));
      if (on_run) on_run();
    }
  }
  return out;
}

std::string LongGenerationReport(const std::vector<LongGenerationTask>& tasks,
                                 const LongGenerationOptions& options) {
  double full_correct = 0.0, full_peak = 0.0, trace = 0.0, trace_seconds = 0.0, prompt = 0.0;
  for (const LongGenerationTask& t : tasks) {
    full_correct += t.full_correct ? 1.0 : 0.0;
    full_peak += static_cast<double>(t.full_peak_entries);
    trace += static_cast<double>(t.trace_tokens);
    trace_seconds += t.trace_seconds;
    prompt += static_cast<double>(t.prompt_tokens);
  }
  const double n = static_cast<double>(std::max<size_t>(tasks.size(), 1));
  std::string out = absl::StrFormat(
      "%d tasks, prompts of %.0f tokens and reference traces of %.0f tokens on average; an "
      "eviction every %d fed tokens.\n\n"
      "| method | budget (entries per head) | accuracy | retained | retained, with recall | "
      "KL (nats) | agreement | peak entries per head | overhead |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      "| full | — | %.0f %% | 100 %% | — | 0 | 1.000 | %.0f | — |\n",
      tasks.size(), prompt / n, trace / n, options.interval, 100 * full_correct / n, full_peak / n);
  const size_t runs = tasks.empty() ? 0 : tasks.front().runs.size();
  for (size_t r = 0; r < runs; ++r) {
    double correct = 0.0, retained = 0.0, recalled = 0.0, kl = 0.0, agreement = 0.0, peak = 0.0,
           seconds = 0.0;
    for (const LongGenerationTask& t : tasks) {
      const LongGenerationRun& run = t.runs[r];
      correct += run.correct ? 1.0 : 0.0;
      retained += run.correct && t.full_correct ? 1.0 : 0.0;
      recalled += run.recall_correct && t.full_correct ? 1.0 : 0.0;
      kl += run.kl;
      agreement += run.agreement;
      peak += static_cast<double>(run.peak_entries);
      seconds += run.eviction_seconds;
    }
    const LongGenerationRun& first = tasks.front().runs[r];
    auto share = [&](double x) {
      return full_correct > 0 ? absl::StrFormat("%.0f %%", 100 * x / full_correct)
                              : std::string("—");
    };
    absl::StrAppendFormat(&out, "| %s | %d | %.0f %% | %s | %s | %.4f | %.3f | %.0f | %.2f %% |\n",
                          first.label, first.budget, 100 * correct / n, share(retained),
                          first.recall_run ? share(recalled) : std::string("—"), kl / n,
                          agreement / n, peak / n, 100 * seconds / std::max(trace_seconds, 1e-9));
  }
  absl::StrAppend(
      &out,
      "\naccuracy: turn 2's answer holds the expected answer. retained: of the tasks the full "
      "cache answers, the share this row answers too (turn 2 fed whole over what is left). with "
      "recall: turn 2 run as a worker's next turn, prefilled with eviction at the budget and "
      "offered everything evicted so far as recall candidates (half the budget per head). KL: mean "
      "KL(full ‖ evicted) of the "
      "next-token distribution over the trace's steps, the full cache's trace teacher-forced. "
      "agreement: share of trace steps whose greedy token is the reference's. peak: the most "
      "entries a (layer, kv-head) held (mean over tasks). overhead: evictions' time as a share of "
      "the full cache's trace decode.\n");
  return out;
}

}  // namespace glimpse::eviction::eval
