// End-to-end throughput of our model runtime, measured the way bench/llama_cpp_bench.py measures
// llama.cpp, so bench/run_model_bench.sh can print the two side by side.
//
//   prefill: a --prompt-tokens prompt (bench/prompt.txt tokenized by our tokenizer and repeated,
//            or the ids in --tokens FILE) through Session::Forward from an empty cache; one
//            warm-up run, then --reps runs; median tok/s.
//   decode:  after the prompt, --decode-tokens greedy tokens, one Forward({token}) each (argmax of
//            the returned logits; end-of-generation tokens are ignored); median tok/s.
//   batch:   with --batch B, B sessions each prefilled with the prompt decode --decode-tokens
//            greedy tokens together, one model::ForwardPass of B rows per step (the decode
//            worker's engine step); aggregate tok/s, and its ratio to the single-session decode
//            tok/s of the same run.
//   --kv-format F: the KV cache in pool pages of F (fp16, bf16, int8, fp8_e4m3, kivi4, kivi2)
//            instead of the default private fp32 pages; full pages are sealed after the prefill
//            and after every decode step, as the workers do (KIVI, model/kv_cache.h).
//   peak_rss_mb: getrusage(RUSAGE_SELF).ru_maxrss (mapped weights count once touched);
//   cpu_s: the process's user + system CPU time, load and warm-up included.
//
// Prints one JSON object on stdout; a progress bar and per-run lines go to stderr. Exit status 1
// with a message on any error (bad flag, missing model, runtime error).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/flags.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/model/forward_pass.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "core/model/sequence.h"
#include "core/worker/policy.h"
#include "kernels/cpu/parallel.h"
#include "nlohmann/json.hpp"

#ifndef GLIMPSE_BENCH_DIR
#define GLIMPSE_BENCH_DIR "bench"
#endif

namespace glimpse::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string prompt_file = GLIMPSE_BENCH_DIR "/prompt.txt";
  std::string tokens_file;  // ids, one per line; overrides prompt_file
  int threads = 2;
  int prompt_tokens = 512;
  int decode_tokens = 128;
  int reps = 3;
  int prefill_chunk = 0;  // 0 = the runtime's default
  int batch = 0;          // 0: no batched decode
  std::string kv_format;  // "": a private fp32 pool
};

constexpr char kUsage[] =
    "usage: glimpse_bench_model [--model PATH] [--threads N] [--prompt-tokens N]\n"
    "         [--decode-tokens N] [--reps N] [--prefill-chunk N] [--prompt-file PATH]\n"
    "         [--tokens FILE] [--batch B] [--kv-format fp16|bf16|int8|fp8_e4m3|kivi4|kivi2]\n"
    "Defaults: the cached default model, GLIMPSE_THREADS or 2 threads, 512 prompt tokens,\n"
    "128 decode tokens, 3 repetitions after one warm-up.\n";

absl::StatusOr<BenchOptions> ParseArgs(int argc, char** argv) {
  BenchOptions o;
  o.model = model::DefaultModelPath();
  if (const char* t = std::getenv("GLIMPSE_THREADS"); t && *t) {
    ASSIGN_OR_RETURN(o.threads, ParsePositive("GLIMPSE_THREADS", t));
  }
  const auto take = [&](const std::string& flag, const std::string& value) -> absl::Status {
    if (flag == "--model") {
      o.model = value;
    } else if (flag == "--prompt-file") {
      o.prompt_file = value;
    } else if (flag == "--tokens") {
      o.tokens_file = value;
    } else if (flag == "--threads") {
      ASSIGN_OR_RETURN(o.threads, ParsePositive(flag, value));
    } else if (flag == "--prompt-tokens") {
      ASSIGN_OR_RETURN(o.prompt_tokens, ParsePositive(flag, value));
    } else if (flag == "--decode-tokens") {
      ASSIGN_OR_RETURN(o.decode_tokens, ParsePositive(flag, value));
    } else if (flag == "--reps") {
      ASSIGN_OR_RETURN(o.reps, ParsePositive(flag, value));
    } else if (flag == "--prefill-chunk") {
      ASSIGN_OR_RETURN(o.prefill_chunk, ParsePositive(flag, value));
    } else if (flag == "--batch") {
      ASSIGN_OR_RETURN(o.batch, ParsePositive(flag, value));
    } else if (flag == "--kv-format") {
      o.kv_format = value;
    } else {
      return UnknownFlag(flag, kUsage);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachFlag(argc, argv, kUsage, take));
  return o;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The prompt: ids from --tokens, else prompt_file encoded by the model's tokenizer; repeated or
// cut to exactly `prompt_tokens`.
absl::StatusOr<std::vector<int32_t>> PromptTokens(const BenchOptions& o, const model::Model& m) {
  std::vector<int32_t> base;
  if (!o.tokens_file.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(o.tokens_file));
    std::istringstream in(text);
    for (int64_t id; in >> id;) base.push_back(static_cast<int32_t>(id));
  } else {
    ASSIGN_OR_RETURN(std::string text, ReadFile(o.prompt_file));
    base = m.tokenizer().Encode(text);
  }
  if (base.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no prompt tokens from ", o.tokens_file.empty() ? o.prompt_file : o.tokens_file));
  }
  std::vector<int32_t> tokens;
  tokens.reserve(o.prompt_tokens);
  while (static_cast<int>(tokens.size()) < o.prompt_tokens) {
    tokens.push_back(base[tokens.size() % base.size()]);
  }
  return tokens;
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Usage {
  double peak_rss_mb = 0;
  double cpu_s = 0;  // user + system, load and warm-up included
};

Usage SelfUsage() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return {static_cast<double>(ru.ru_maxrss) / 1024.0,  // Linux reports KiB
          secs(ru.ru_utime) + secs(ru.ru_stime)};
}

// One repetition: prefill `tokens` from an empty cache, then greedy-decode `decode_tokens`.
struct RunTimes {
  double prefill_s = 0;
  double decode_s = 0;
};

absl::StatusOr<RunTimes> RunOnce(model::Sequence& session, const std::vector<int32_t>& tokens,
                                 int decode_tokens, ProgressBar* bar, int64_t* done) {
  RunTimes t;
  session.Reset();
  auto start = Clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, session.Forward(tokens));
  session.cache().Seal();
  t.prefill_s = Seconds(start);
  *done += static_cast<int64_t>(tokens.size());
  if (bar) bar->Update(*done);
  start = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) {
    const int32_t next = Argmax(logits);
    ASSIGN_OR_RETURN(logits, session.Forward(std::span<const int32_t>(&next, 1)));
    session.cache().Seal();
    if (bar) bar->Update(++*done);
  }
  t.decode_s = Seconds(start);
  return t;
}

// `batch` sessions prefilled with `tokens`, then `decode_tokens` steps of one ForwardPass over all
// of them; the steps' seconds.
absl::StatusOr<double> BatchDecode(const model::Model& m, kernels::ThreadPool& pool,
                                   const model::SequenceOptions& options,
                                   const std::vector<int32_t>& tokens, int batch,
                                   int decode_tokens) {
  std::vector<std::unique_ptr<model::Sequence>> sessions;
  std::vector<std::vector<float>> logits;
  for (int b = 0; b < batch; ++b) {
    sessions.push_back(std::make_unique<model::Sequence>(m, pool, options));
    ASSIGN_OR_RETURN(std::vector<float> l, sessions.back()->Forward(tokens));
    sessions.back()->cache().Seal();
    logits.push_back(std::move(l));
  }
  model::ForwardPass pass(m, pool);
  std::vector<int32_t> next(batch);
  std::vector<model::BatchRows> rows(batch);
  ProgressBar bar("bench ours, batched decode", int64_t{batch} * decode_tokens);
  const auto start = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) {
    for (int b = 0; b < batch; ++b) {
      next[b] = Argmax(logits[b]);
      rows[b].sequence = sessions[b].get();
      rows[b].tokens = std::span(&next[b], 1);
    }
    ASSIGN_OR_RETURN(logits, pass.Run(rows));
    for (const auto& s : sessions) s->cache().Seal();
    bar.Update(int64_t{batch} * (i + 1));
  }
  const double seconds = Seconds(start);
  bar.Done();
  return seconds;
}

absl::Status Run(const BenchOptions& o) {
  auto start = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::Model::Load(o.model));
  const double load_s = Seconds(start);
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, PromptTokens(o, *m));

  kernels::ThreadPool pool(o.threads);
  model::SequenceOptions session_options;
  session_options.max_context = o.prompt_tokens + o.decode_tokens + 16;
  if (o.prefill_chunk > 0) session_options.prefill_chunk = o.prefill_chunk;
  std::unique_ptr<model::KvPool> kv_pool;  // unbounded pages of --kv-format
  if (!o.kv_format.empty()) {
    const kvpage::CodecInfo* codec = kvpage::FindCodecByName(o.kv_format);
    if (codec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-format ", o.kv_format, " is no codec"));
    }
    kv_pool = std::make_unique<model::KvPool>(
        model::KvPool::Options{.page_tokens = 64, .head_dim = m->config().head_dim});
    session_options.kv_pool = kv_pool.get();
    session_options.kv_dtype = worker::HotFormat(codec->id);
  }
  model::Sequence session(*m, pool, session_options);

  int64_t done = 0;
  RETURN_IF_ERROR(RunOnce(session, tokens, 8, nullptr, &done).status());  // warm-up

  const int64_t per_rep = o.prompt_tokens + o.decode_tokens;
  ProgressBar bar("bench ours", per_rep * o.reps);
  std::vector<double> prefill_s, decode_s;
  done = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    ASSIGN_OR_RETURN(RunTimes t, RunOnce(session, tokens, o.decode_tokens, &bar, &done));
    prefill_s.push_back(t.prefill_s);
    decode_s.push_back(t.decode_s);
  }
  bar.Done();
  for (int rep = 0; rep < o.reps; ++rep) {
    std::fprintf(stderr, "ours rep %d/%d: prefill %.1f tok/s, decode %.1f tok/s\n", rep + 1, o.reps,
                 o.prompt_tokens / prefill_s[rep], o.decode_tokens / decode_s[rep]);
  }

  std::optional<double> batch_s;
  if (o.batch > 0) {
    ASSIGN_OR_RETURN(batch_s,
                     BatchDecode(*m, pool, session_options, tokens, o.batch, o.decode_tokens));
    std::fprintf(stderr, "ours batch %d: decode %.1f tok/s (%.2fx one session)\n", o.batch,
                 o.batch * o.decode_tokens / *batch_s,
                 (o.batch * o.decode_tokens / *batch_s) / (o.decode_tokens / Median(decode_s)));
  }

  const Usage usage = SelfUsage();
  nlohmann::json out = {
      {"engine", "glimpse"},
      {"model", o.model.substr(o.model.find_last_of('/') + 1)},
      {"threads", pool.size()},
      {"kv_format", o.kv_format.empty() ? "fp32" : o.kv_format},
      {"prompt_tokens", o.prompt_tokens},
      {"decode_tokens", o.decode_tokens},
      {"reps", o.reps},
      {"load_s", load_s},
      {"prefill_tok_s", o.prompt_tokens / Median(prefill_s)},
      {"decode_tok_s", o.decode_tokens / Median(decode_s)},
      {"prefill_s", prefill_s},
      {"decode_s", decode_s},
      {"peak_rss_mb", usage.peak_rss_mb},
      {"cpu_s", usage.cpu_s},
  };
  if (batch_s) {
    const double batch_tok_s = o.batch * o.decode_tokens / *batch_s;
    out["batch"] = o.batch;
    out["batch_decode_tok_s"] = batch_tok_s;
    out["batch_decode_ratio"] = batch_tok_s / out["decode_tok_s"].get<double>();
  }
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace glimpse::bench

int main(int argc, char** argv) {
  return glimpse::bench::BenchMain("glimpse_bench_model", argc, argv, glimpse::bench::ParseArgs,
                                   glimpse::bench::Run);
}
