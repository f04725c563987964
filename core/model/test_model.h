// The default model shared by the tests of one binary: SmolLM2-135M-Instruct at
// DefaultModelPath(), which `make test` fetches before the suite runs. Test use only.
#pragma once

#include "core/model/model.h"
#include "kernels/cpu/parallel.h"

namespace glimpse::model::testing {

// Loads the model on first use and keeps it for the life of the process. Returns nullptr after
// recording a gtest failure that says how to fetch it.
const Model* SharedDefaultModel();

// A pool with one thread per core, shared likewise.
kernels::ThreadPool& SharedPool();

}  // namespace glimpse::model::testing
