// Limits of the wire API that more than one service checks, and the one check of an id
// (proto/README.md, "Conventions"). Each returns InvalidArgument naming the field and the value.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace glimpse::v1 {

inline constexpr size_t kMaxIdBytes = 128;        // session, node and tenant ids
inline constexpr size_t kMaxToolNameBytes = 128;  // a turn's tool_name

// OK when `id` is 1 to kMaxIdBytes of [A-Za-z0-9._:-].
absl::Status CheckId(std::string_view field, std::string_view id);
// OK when `name` is at most kMaxToolNameBytes long.
absl::Status CheckToolName(std::string_view field, std::string_view name);

}  // namespace glimpse::v1
