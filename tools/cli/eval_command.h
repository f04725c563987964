// `glimpse eval`: the eviction quality harness. Generates the synthetic suite
// (core/eviction/eval/tasks.h), scores every method at every budget against the full cache
// (core/eviction/eval/runner.h) and writes DIR/eval.md (markdown table), DIR/eval.json and
// DIR/eval.png (score vs budget, drawn by tools/plot_eval.py).
#pragma once

namespace glimpse::cli {

// Returns the process exit code: 0 on success, 1 on an error (printed to stderr), 2 on bad usage.
int EvalCommand(int argc, char** argv);

}  // namespace glimpse::cli
