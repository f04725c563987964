// The glimpse command-line tool: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/common/log.h"
#include "tools/cli/certs_command.h"
#include "tools/cli/cluster_commands.h"
#include "tools/cli/eval_command.h"
#include "tools/cli/evict_command.h"
#include "tools/cli/generate_command.h"
#include "tools/cli/tune_command.h"

namespace {

constexpr char kUsage[] =
    "usage: glimpse <command> [flags]\n"
    "\n"
    "commands:\n"
    "  generate   run the model on a prompt or a chat (glimpse generate --help)\n"
    "  evict      prefill a prompt with KV-cache eviction, report kept positions (--help)\n"
    "  eval       score eviction methods and budgets against the full cache (--help)\n"
    "  tune       choose each eviction method's settings for a model by measurement (--help)\n"
    "  up         start a local cluster (coordinator, cache node, decode worker, frontend)\n"
    "  chat       a multi-turn chat against a running frontend (--help)\n"
    "  certs      a CA and certificates for a deployment's mutual TLS (--help)\n"
    "\n"
    "environment: GLIMPSE_MODEL (model file), GLIMPSE_CACHE_DIR (cache, default "
    "~/.cache/glimpse),\n"
    "             GLIMPSE_LOG_LEVEL (debug|info|warning|error, default warning for the CLI)\n";

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("GLIMPSE_LOG_LEVEL") == nullptr) {
    glimpse::log::SetMinLevel(glimpse::log::Level::kWarning);
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "generate") return glimpse::cli::GenerateCommand(argc, argv);
  if (command == "evict") return glimpse::cli::EvictCommand(argc, argv);
  if (command == "eval") return glimpse::cli::EvalCommand(argc, argv);
  if (command == "tune") return glimpse::cli::TuneCommand(argc, argv);
  if (command == "up") return glimpse::cli::UpCommand(argc, argv);
  if (command == "chat") return glimpse::cli::ChatCommand(argc, argv);
  if (command == "certs") return glimpse::cli::CertsCommand(argc, argv);
  std::fprintf(stderr, "glimpse: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
