// model::Generate on the device: the prompt through DeviceRunner::Prefill, then one decode step
// per sampled token. Sampling and stopping are the CPU path's (model::Sampler on the logits copied
// back, model::DecodeState's end-of-generation, token and capacity limits), so the same options
// give the same behaviour on either device.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/statusor.h"
#include "core/model/cuda/device_model.h"
#include "core/model/generator.h"
#include "core/model/sampler.h"

namespace glimpse::model::cuda {

// Runs `prompt` (appended to what `seq` holds) and generates up to `max_tokens`; `on_token` (may
// be empty) sees each generated token. Errors are the runner's, before anything is generated.
absl::StatusOr<GenerationResult> Generate(DeviceRunner& runner, DeviceSequence& seq,
                                          Sampler& sampler, std::span<const int32_t> prompt,
                                          int32_t max_tokens,
                                          const std::function<void(int32_t)>& on_token = {});

}  // namespace glimpse::model::cuda
