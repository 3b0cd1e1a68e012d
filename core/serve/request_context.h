#ifndef REPLICAD_CORE_SERVE_REQUEST_CONTEXT_H_
#define REPLICAD_CORE_SERVE_REQUEST_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace replicad {

// What a client said about its request besides the tensors, in the core's
// terms: every protocol fills it from its own fields (a gRPC deadline,
// KServe's `timeout` and `priority` parameters, an `id`), and the serving
// core carries it down to where work is queued and dispatched.
struct RequestContext {
  // Echoed in responses by protocols that carry one.
  std::string id;
  // Work not started by then is answered DEADLINE_EXCEEDED without running;
  // work running then stops at its next kernel (unless another request of
  // its batch still wants it).
  absl::Time deadline = absl::InfiniteFuture();
  // The request's own limit on its time in the queue (Triton's `timeout`
  // parameter); zero: none. Its model's queue policy says whether it may
  // shorten the policy's default (SchedulerOptions).
  absl::Duration timeout = absl::ZeroDuration();
  // Triton's convention: 0 is the default level, otherwise 1 is the highest
  // and larger numbers come later (SchedulerOptions::LevelOf).
  uint64_t priority = 0;
  // Optional; true once the client has given up (a cancelled RPC, a closed
  // connection). Called from core threads, between kernels too, so it must
  // be thread-safe and cheap.
  std::function<bool()> cancelled;
  // Optional, set by the serving core: true once the server has stopped
  // serving (its shutdown's grace period is over), when nothing is wanted
  // any more. Must outlive the request's answer.
  const std::atomic<bool>* server_stopped = nullptr;

  // OK while the request is still wanted: Unavailable (the server stopped),
  // Cancelled or DeadlineExceeded naming `stage` ("while queued") otherwise.
  // Cheap enough to ask between kernels (a load, a clock read, `cancelled`).
  absl::Status StillWanted(const char* stage, absl::Time now = absl::Now()) const;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REQUEST_CONTEXT_H_
