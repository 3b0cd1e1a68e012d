#ifndef REPLICAD_CORE_BASE_LOG_H_
#define REPLICAD_CORE_BASE_LOG_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace replicad {

// The daemon's log, on spdlog. One line per event:
//  - text (the default): "replicad: <message>", informational lines on
//    stdout and warnings and errors on stderr, as a person reads them in a
//    terminal and as `kubectl logs` shows them;
//  - json: one object per line on stdout, {"time": RFC 3339 UTC with
//    microseconds, "level": "info"|"warning"|"error"|"verbose", "verbose":
//    level (verbose lines only), "message": ...}, for log collectors (Loki,
//    Fluent Bit, Cloud Logging) that parse fields instead of text.
// Verbose lines (Triton's --log-verbose) are written only at or below the
// configured verbose level: 0 writes none (the default), 1 adds a line per
// request answered. Thread-safe; a line is written whole and flushed at
// once, so lines of concurrent threads never interleave and a crash loses
// none.
enum class LogFormat { kText, kJson };

// "text" or "json"; InvalidArgument naming `value` otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view value);

// Sets the format and verbose level for every later line. Call once at
// start-up, before other threads log; until then lines are text, verbose 0.
void ConfigureLog(LogFormat format, int verbose_level);

void LogInfo(absl::string_view message);
void LogWarning(absl::string_view message);
void LogError(absl::string_view message);

// True when lines of `level` (>= 1) are written: test it before building
// an expensive message.
bool VerboseLogOn(int level);
void LogVerbose(int level, absl::string_view message);

}  // namespace replicad

#endif  // REPLICAD_CORE_BASE_LOG_H_
