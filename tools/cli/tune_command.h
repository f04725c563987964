// `glimpse tune`: chooses each eviction method's settings for a model by measurement on a
// calibration set of Debian texts (core/eviction/eval/calibration.h, tune.h) and writes the
// model's eviction profile (core/eviction/profile.h), by default beside its LookaheadKV module,
// where the workers, `glimpse eval` and `glimpse evict` find it.
#pragma once

namespace glimpse::cli {

// Returns the process exit code: 0 on success, 1 on an error (printed to stderr), 2 on bad usage.
int TuneCommand(int argc, char** argv);

}  // namespace glimpse::cli
