#ifndef REPLICAD_CORE_BASE_STATUS_MACROS_H_
#define REPLICAD_CORE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Early returns for absl::Status and absl::StatusOr, the way every layer
// propagates failures (DESIGN.md: no exceptions cross a module boundary).

// Evaluates `expr` (an absl::StatusOr); returns its status from the enclosing
// function on failure, else moves the value into `lhs`.
#define REPLICAD_ASSIGN_OR_RETURN(lhs, expr) \
  REPLICAD_ASSIGN_OR_RETURN_IMPL_(REPLICAD_CONCAT_(status_or_, __LINE__), lhs, expr)
#define REPLICAD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
#define REPLICAD_CONCAT_(a, b) REPLICAD_CONCAT_IMPL_(a, b)
#define REPLICAD_CONCAT_IMPL_(a, b) a##b

// Returns `expr` (an absl::Status) from the enclosing function unless it is OK.
#define REPLICAD_RETURN_IF_ERROR(expr) \
  do {                                 \
    absl::Status status_ = (expr);     \
    if (!status_.ok()) return status_; \
  } while (false)

#endif  // REPLICAD_CORE_BASE_STATUS_MACROS_H_
