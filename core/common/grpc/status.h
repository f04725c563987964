// absl::Status <-> grpc::Status, for gRPC adapters only (libraries never include gRPC). Codes map
// one to one (both follow google.rpc.Code); the message is kept as is.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace glimpse {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace glimpse

// In a gRPC handler: returns `expr` (an absl::Status) as a grpc::Status unless it is OK.
#define GRPC_RETURN_IF_ERROR(expr)                                                        \
  do {                                                                                    \
    if (const absl::Status grpc_return_if_error_ = (expr); !grpc_return_if_error_.ok()) { \
      return ::glimpse::ToGrpcStatus(grpc_return_if_error_);                              \
    }                                                                                     \
  } while (0)
