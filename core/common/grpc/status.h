// absl::Status <-> grpc::Status, for gRPC adapters only (libraries never include gRPC). Codes map
// one to one (both follow google.rpc.Code); the message is kept as is.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace glimpse {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace glimpse
