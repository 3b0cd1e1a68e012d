#include "core/serve/request_context.h"

#include "absl/strings/str_cat.h"

namespace replicad {

absl::Status RequestContext::StillWanted(const char* stage, absl::Time now) const {
  if (server_stopped != nullptr && server_stopped->load(std::memory_order_relaxed)) {
    return absl::UnavailableError(
        absl::StrCat("replicad is shutting down and its grace period is over: the request was "
                     "stopped ",
                     stage));
  }
  if (cancelled && cancelled()) {
    return absl::CancelledError(absl::StrCat("the client cancelled the request ", stage));
  }
  if (now >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat("the request's deadline passed ", stage, " (",
                                                    absl::FormatDuration(now - deadline), " ago)"));
  }
  return absl::OkStatus();
}

}  // namespace replicad
