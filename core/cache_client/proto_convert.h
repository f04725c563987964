// Conversions between the cache node's protobuf messages (proto/glimpse/v1/cache_node.proto) and
// the domain types of core/kvstate, shared by the node's gRPC adapter and the client library.
// From-proto conversions validate what a message can get wrong on its own (key and digest sizes,
// an unspecified or unknown tier) and return InvalidArgument naming the field; the manifest's
// structure is checked by kvstate::ValidateManifest afterwards.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/kvstate/manifest.h"
#include "glimpse/v1/cache_node.pb.h"

namespace glimpse::cache_client {

absl::StatusOr<std::array<uint8_t, 16>> Key16FromBytes(const std::string& bytes,
                                                       std::string_view field);
std::string BytesOf(const std::array<uint8_t, 16>& key);

void ManifestToProto(const kvstate::Manifest& m, v1::StateManifest* out);
absl::StatusOr<kvstate::Manifest> ManifestFromProto(const v1::StateManifest& p);

}  // namespace glimpse::cache_client
