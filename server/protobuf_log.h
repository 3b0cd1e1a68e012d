#ifndef REPLICAD_SERVER_PROTOBUF_LOG_H_
#define REPLICAD_SERVER_PROTOBUF_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace replicad {

// Protobuf writes a line to stderr for every request that carries invalid
// UTF-8 in a string field, so a hostile client (or a fuzzer) could grow the
// daemon's log without bound. LogLimiter lets through `burst` lines per
// `window` and counts the rest; the first line after a window in which
// lines were dropped says how many. Thread-safe.
class LogLimiter {
 public:
  using Sink = std::function<void(const std::string& line)>;
  LogLimiter(int burst, absl::Duration window, Sink sink)
      : burst_(burst), window_(window), sink_(std::move(sink)) {}

  // Writes `line` through the sink, or counts it as dropped. `now` for tests.
  void Log(const std::string& line, absl::Time now = absl::Now());

 private:
  const int burst_;
  const absl::Duration window_;
  const Sink sink_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends protobuf's log lines (warnings and errors; fatal ones as before)
// through a LogLimiter of 10 lines a minute to stderr. Call once, before
// serving (protobuf's handler is process-wide and not thread-safe to set).
void RateLimitProtobufLogs();

// The same for gRPC's own log lines (one per failed TLS handshake, for
// instance, which any peer without credentials can cause at will): through
// a LogLimiter of 10 lines a minute to stderr. Call once, before serving.
void RateLimitGrpcLogs();

}  // namespace replicad

#endif  // REPLICAD_SERVER_PROTOBUF_LOG_H_
