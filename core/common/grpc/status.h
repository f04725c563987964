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

// In a gRPC handler: assigns the value of `expr` (an absl::StatusOr) to `lhs`, or returns its
// status as a grpc::Status.
#define GRPC_ASSIGN_OR_RETURN(lhs, expr) \
  GRPC_ASSIGN_OR_RETURN_IMPL_(GLIMPSE_GRPC_CONCAT_(grpc_statusor_, __LINE__), lhs, expr)
#define GRPC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                       \
  auto tmp = (expr);                                                      \
  if (!tmp.ok()) return ::glimpse::ToGrpcStatus(std::move(tmp).status()); \
  lhs = std::move(tmp).value()
#define GLIMPSE_GRPC_CONCAT_INNER_(a, b) a##b
#define GLIMPSE_GRPC_CONCAT_(a, b) GLIMPSE_GRPC_CONCAT_INNER_(a, b)
