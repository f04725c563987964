// Checks of the request fields prefill and decode workers share (decode_worker.proto,
// prefill_worker.proto); each error is InvalidArgument naming the field.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/kvstate/state_key.h"
#include "core/worker/policy.h"
#include "glimpse/v1/decode_worker.pb.h"

namespace glimpse::worker {

absl::StatusOr<kvstate::NamespaceKey> NamespaceFromBytes(const std::string& bytes);  // 16 bytes
absl::StatusOr<Policy> PolicyFromProto(const v1::EvictionPolicy& p);

}  // namespace glimpse::worker
