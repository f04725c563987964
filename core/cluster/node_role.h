// A registered node's role as its certificate names it (core/common/grpc/identity.h): what the
// coordinator checks a registration against, and what the peer allowlist knows each address by.
#pragma once

#include <string_view>

#include "core/common/grpc/identity.h"
#include "glimpse/v1/coordinator.pb.h"

namespace glimpse::cluster {

// "decode", "prefill" or "cache"; "" for another value.
inline std::string_view NodeRoleName(v1::NodeRole role) {
  switch (role) {
    case v1::NODE_ROLE_DECODE:
      return roles::kDecode;
    case v1::NODE_ROLE_PREFILL:
      return roles::kPrefill;
    case v1::NODE_ROLE_CACHE:
      return roles::kCache;
    default:
      return "";
  }
}

}  // namespace glimpse::cluster
