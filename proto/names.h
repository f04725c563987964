// Display names of the API's enums, as metrics labels, the CLI and the OpenAI API's extension
// write them.
#pragma once

#include <string>

#include "glimpse/v1/turn.pb.h"

namespace glimpse::v1 {

// "hot", "warm", "recompute", "prefill_worker": the enum's name without its prefix, lowercase.
std::string StateSourceName(StateSource source);

}  // namespace glimpse::v1
