// The coordinator's configuration keys (config.h) and their translation into CoordinatorOptions.
// Defaults come from measured figures where one exists (docs/configuration.md "Coordinator").
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_service.h"
#include "core/common/config.h"

namespace glimpse::coordinator {

std::vector<ConfigKey> CoordinatorConfigKeys();

// Every value validated; errors name the key and the value.
absl::StatusOr<CoordinatorOptions> OptionsFromConfig(const Config& config);

}  // namespace glimpse::coordinator
