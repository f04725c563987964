// Error propagation for absl::Status / absl::StatusOr, the only error channel in Glimpse.
//
//   RETURN_IF_ERROR(expr);             // returns the status of `expr` if it is not OK
//   ASSIGN_OR_RETURN(auto x, expr);    // unwraps a StatusOr or returns its error
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GLIMPSE_CONCAT_INNER(a, b) a##b
#define GLIMPSE_CONCAT(a, b) GLIMPSE_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status glimpse_status_ = (expr);           \
    if (!glimpse_status_.ok()) return glimpse_status_; \
  } while (0)

#define GLIMPSE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  GLIMPSE_ASSIGN_OR_RETURN_IMPL(GLIMPSE_CONCAT(glimpse_statusor_, __LINE__), lhs, expr)
