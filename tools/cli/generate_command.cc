#include "tools/cli/generate_command.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/common/status_macros.h"
#include "core/model/generator.h"
#include "core/model/model.h"
#include "core/model/model_store.h"
#include "core/model/text_stream.h"
#include "nlohmann/json.hpp"
#include "tools/cli/args.h"

#ifdef GLIMPSE_HAVE_CUDA
#include "core/model/cuda/device_generate.h"
#endif

namespace glimpse::cli {
namespace {

const std::vector<FlagSpec>& GenerateFlags() {
  static const std::vector<FlagSpec> flags = {
      {"model", "GGUF model file", false, "the cached default model"},
      {"prompt", "prompt text (with --chat: the user's message)", false, ""},
      {"prompt-tokens", "prompt as comma-separated token ids, instead of --prompt", false, ""},
      {"context", "context length in tokens, 0 = the model's", false, "0"},
      {"chat", "chat with the model's template; without --prompt, each stdin line is a turn", true,
       ""},
      {"max-tokens", "tokens to generate per turn", false, "128"},
      {"temperature", "sampling temperature, 0 = greedy", false, "0"},
      {"top-k", "keep the k most likely tokens, 0 = off", false, "0"},
      {"top-p", "nucleus sampling mass, 1 = off", false, "1"},
      {"seed", "random seed for sampling", false, "0"},
      {"threads", "worker threads", false, "the number of cores"},
      {"device", "where the model runs: cpu, or cuda (an NVIDIA GPU)", false, "cpu"},
      {"json", "print {\"prompt_tokens\",\"tokens\",\"text\"} (one line per turn)", true, ""},
      {"help", "show this help", true, ""},
  };
  return flags;
}

struct GenerateOptions {
  std::string model_path;
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool has_prompt = false;
  bool has_prompt_tokens = false;
  bool chat = false;
  bool json = false;
  int32_t max_tokens = 128;
  int32_t threads = 0;
  int32_t context = 0;
  bool cuda = false;
  model::SamplingOptions sampling;
};

// One turn: generates from `prompt`, showing each token to `on_token`.
using TurnGenerator = std::function<absl::StatusOr<model::GenerationResult>(
    const std::vector<int32_t>& prompt, const std::function<void(int32_t)>& on_token)>;

absl::StatusOr<std::vector<int32_t>> ParseTokenList(const std::string& list) {
  std::vector<int32_t> tokens;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-tokens: '", std::string(part), "' is not a token id"));
    }
    tokens.push_back(id);
  }
  return tokens;
}

absl::StatusOr<GenerateOptions> ParseOptions(const Args& args) {
  GenerateOptions o;
  o.model_path = args.GetString("model");
  o.prompt = args.GetString("prompt");
  o.has_prompt = args.Has("prompt");
  o.chat = args.Has("chat");
  o.json = args.Has("json");
  o.has_prompt_tokens = args.Has("prompt-tokens");
  if (o.has_prompt_tokens) {
    if (o.has_prompt || o.chat) {
      return absl::InvalidArgumentError("--prompt-tokens excludes --prompt and --chat");
    }
    ASSIGN_OR_RETURN(o.prompt_tokens, ParseTokenList(args.GetString("prompt-tokens")));
  } else if (!o.has_prompt && !o.chat) {
    return absl::InvalidArgumentError("give --prompt TEXT, --prompt-tokens IDS or --chat");
  }
  ASSIGN_OR_RETURN(int64_t context, args.GetInt("context", 0));
  if (context < 0 || context > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--context must be in [0, 2^24], got ", context));
  }
  o.context = static_cast<int32_t>(context);
  const std::string device = args.GetString("device");
  if (device != "cpu" && device != "cuda" && !device.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got '", device, "'"));
  }
  o.cuda = device == "cuda";
  ASSIGN_OR_RETURN(int64_t max_tokens, args.GetInt("max-tokens", 128));
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0));
  ASSIGN_OR_RETURN(double temperature, args.GetDouble("temperature", 0.0));
  ASSIGN_OR_RETURN(int64_t top_k, args.GetInt("top-k", 0));
  ASSIGN_OR_RETURN(double top_p, args.GetDouble("top-p", 1.0));
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 0));
  if (max_tokens < 1 || max_tokens > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-tokens must be in [1, 1000000], got ", max_tokens));
  }
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [0, 1024], got ", threads));
  }
  o.max_tokens = static_cast<int32_t>(max_tokens);
  o.threads = static_cast<int32_t>(threads);
  o.sampling = {static_cast<float>(temperature), static_cast<int32_t>(top_k),
                static_cast<float>(top_p), static_cast<uint64_t>(seed)};
  return o;
}

// Runs one turn: feeds `prompt`, streams text to stdout unless `json`.
absl::StatusOr<model::GenerationResult> RunTurn(const model::Tokenizer& tok,
                                                const TurnGenerator& generate,
                                                const std::vector<int32_t>& prompt,
                                                const GenerateOptions& o) {
  // The turn's text, valid UTF-8 whatever the model emits (model::TextStream): streamed as it
  // grows, or printed whole in the JSON line.
  model::TextStream text_stream(tok);
  std::string text;
  auto stream = [&](int32_t token) {
    absl::StatusOr<std::string> piece = text_stream.Push(token);
    if (!piece.ok() || piece->empty()) return;
    text += *piece;
    if (o.json) return;
    std::fwrite(piece->data(), 1, piece->size(), stdout);
    std::fflush(stdout);
  };
  ASSIGN_OR_RETURN(model::GenerationResult result, generate(prompt, stream));
  ASSIGN_OR_RETURN(std::string rest, text_stream.Finish());
  text += rest;
  if (o.json) {
    nlohmann::json line = {{"prompt_tokens", prompt}, {"tokens", result.tokens}, {"text", text}};
    std::cout << line.dump() << std::endl;
  } else {
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::cout << std::endl;
    const double tps = result.tokens.size() / std::max(result.decode_seconds, 1e-9);
    std::fprintf(stderr, "[prompt %zu tokens in %.3fs, %zu tokens at %.1f tok/s]\n", prompt.size(),
                 result.prefill_seconds, result.tokens.size(), tps);
  }
  return result;
}

// Tokens that close the previous assistant turn and open the next user turn (ChatML): the
// previous turn's unfed last token, "<|im_end|>" if the model did not emit it, then the new turn.
std::vector<int32_t> ContinuationTokens(const model::Tokenizer& tok,
                                        const model::GenerationResult& previous,
                                        const std::string& user_message) {
  std::vector<int32_t> tokens;
  if (previous.unfed_token >= 0) tokens.push_back(previous.unfed_token);
  std::string text = previous.stop == model::StopReason::kEndOfGeneration ? "" : "<|im_end|>";
  absl::StrAppend(&text, "\n<|im_start|>user\n", user_message,
                  "<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<int32_t> rest = tok.Encode(text);
  tokens.insert(tokens.end(), rest.begin(), rest.end());
  return tokens;
}

absl::Status RunChat(const model::Tokenizer& tok, const TurnGenerator& generate,
                     const GenerateOptions& o) {
  std::vector<std::string> messages;
  if (o.has_prompt) {
    messages.push_back(o.prompt);
  } else {
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty()) messages.push_back(line);
    }
  }
  model::GenerationResult previous;
  for (size_t turn = 0; turn < messages.size(); ++turn) {
    if (!o.json) std::printf("> %s\n", messages[turn].c_str());
    const std::vector<int32_t> prompt =
        turn == 0 ? tok.Encode(tok.ApplyChatTemplate({{"user", messages[0]}}, true))
                  : ContinuationTokens(tok, previous, messages[turn]);
    ASSIGN_OR_RETURN(previous, RunTurn(tok, generate, prompt, o));
  }
  return absl::OkStatus();
}

// `run` with turns generated on the CUDA runtime: the model's weights on the device, one sequence
// of the context's capacity.
absl::Status RunOnDevice(const model::Model& model, model::Sampler& sampler,
                         const GenerateOptions& o,
                         const std::function<absl::Status(const TurnGenerator&)>& run) {
#ifdef GLIMPSE_HAVE_CUDA
  ASSIGN_OR_RETURN(auto device, model::cuda::DeviceModel::Upload(model));
  ASSIGN_OR_RETURN(auto runner, model::cuda::DeviceRunner::Create(*device));
  const int64_t capacity = o.context > 0 ? o.context : model.config().context_length;
  ASSIGN_OR_RETURN(auto seq, model::cuda::DeviceSequence::Create(*device, capacity));
  return run([&](const std::vector<int32_t>& prompt, const std::function<void(int32_t)>& on_token) {
    return model::cuda::Generate(*runner, *seq, sampler, prompt, o.max_tokens, on_token);
  });
#else
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA runtime (nvcc was not found when it was built)");
#endif
}

absl::Status Run(const GenerateOptions& o) {
  std::string path = o.model_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, model::EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(path));
  if (o.context > model->config().context_length) {
    return absl::InvalidArgumentError(absl::StrCat("--context ", o.context,
                                                   " exceeds the model's context length ",
                                                   model->config().context_length));
  }
  ASSIGN_OR_RETURN(model::Sampler sampler, model::Sampler::Create(o.sampling));
  const model::Tokenizer& tok = model->tokenizer();
  auto run = [&](const TurnGenerator& generate) -> absl::Status {
    if (o.chat) return RunChat(tok, generate, o);
    const std::vector<int32_t> prompt =
        o.has_prompt_tokens ? o.prompt_tokens : tok.Encode(o.prompt);
    return RunTurn(tok, generate, prompt, o).status();
  };
  if (o.cuda) return RunOnDevice(*model, sampler, o, run);
  kernels::ThreadPool pool(o.threads);
  model::Sequence session(*model, pool, {.max_context = o.context});
  return run([&](const std::vector<int32_t>& prompt, const std::function<void(int32_t)>& on_token) {
    return model::Generate(session, sampler, prompt, o.max_tokens, on_token);
  });
}

}  // namespace

int GenerateCommand(int argc, char** argv) {
  return RunSubcommand<GenerateOptions>(
      "generate", "[--model PATH] (--prompt TEXT | --prompt-tokens IDS | --chat) [flags]",
      GenerateFlags(), argc, argv, &ParseOptions, &Run);
}

}  // namespace glimpse::cli
