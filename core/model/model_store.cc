#include "core/model/model_store.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace glimpse::model {
namespace {

constexpr char kDefaultModelFile[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// The fetch script ships in the source tree; GLIMPSE_FETCH_SCRIPT overrides (installed images).
std::string FetchScript() {
  return EnvOr("GLIMPSE_FETCH_SCRIPT",
               absl::StrCat(GLIMPSE_SOURCE_DIR, "/tools/setup/fetch_model.py"));
}

}  // namespace

std::string DefaultModelPath() {
  if (const char* model = std::getenv("GLIMPSE_MODEL"); model != nullptr && *model != '\0') {
    return model;
  }
  const std::string home = EnvOr("HOME", "/root");
  const std::string cache = EnvOr("GLIMPSE_CACHE_DIR", home + "/.cache/glimpse");
  return absl::StrCat(cache, "/models/", kDefaultModelFile);
}

absl::StatusOr<std::string> EnsureDefaultModel() {
  const std::string path = DefaultModelPath();
  if (std::filesystem::exists(path)) return path;
  if (std::getenv("GLIMPSE_MODEL") != nullptr) {
    return absl::NotFoundError(
        absl::StrCat("GLIMPSE_MODEL names ", path, ", which does not exist"));
  }
  // stdout goes to stderr so a --json caller's stdout stays machine-readable.
  const std::string command = absl::StrCat("python3 ", FetchScript(), " 1>&2");
  const int rc = std::system(command.c_str());
  if (rc != 0 || !std::filesystem::exists(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the default model is not cached at ", path, " and `", command, "` failed (exit ",
        WEXITSTATUS(rc), "); run `make model` or pass --model PATH"));
  }
  return path;
}

}  // namespace glimpse::model
