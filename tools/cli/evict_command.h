// `glimpse evict`: prefill a prompt with KV-cache eviction (core/eviction/pipeline.h) and report
// which positions every (layer, kv-head) keeps, as JSON and as a human summary.
#pragma once

namespace glimpse::cli {

// Returns the process exit code: 0 on success, 1 on an error (printed to stderr), 2 on bad usage.
int EvictCommand(int argc, char** argv);

}  // namespace glimpse::cli
