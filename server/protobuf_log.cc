#include "server/protobuf_log.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/log.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"

namespace replicad {

void LogLimiter::Log(const std::string& line, absl::Time now) {
  std::string out;
  {
    absl::MutexLock lock(&mu_);
    if (now - window_start_ >= window_) {
      if (dropped_ > 0) {
        out = absl::StrCat("(", dropped_, " similar lines dropped in the last ",
                           absl::FormatDuration(window_), ")\n");
      }
      window_start_ = now;
      written_ = 0;
      dropped_ = 0;
    }
    if (written_ >= burst_) {
      ++dropped_;
      if (out.empty()) return;
    } else {
      ++written_;
      out += line;
    }
  }
  sink_(out);
}

namespace {

// The libraries' lines, one daemon log line each (JSON too under
// --log-format json): a collector sees them as it sees ours.
void WarnEachLine(const std::string& lines) {
  for (absl::string_view line : absl::StrSplit(lines, '\n', absl::SkipEmpty())) LogWarning(line);
}

LogLimiter& ProtobufLimiter() {
  static LogLimiter* limiter = new LogLimiter(10, absl::Minutes(1), &WarnEachLine);
  return *limiter;
}

void LimitedProtobufLog(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  static const char* const kLevels[] = {"INFO", "WARNING", "ERROR", "FATAL"};
  const std::string text =
      absl::StrCat("[libprotobuf ", kLevels[level], " ", filename, ":", line, "] ", message, "\n");
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    std::cerr << text << std::flush;  // Protobuf aborts next; say why, bypassing the limiter.
    return;
  }
  ProtobufLimiter().Log(text);
}

LogLimiter& GrpcLimiter() {
  static LogLimiter* limiter = new LogLimiter(10, absl::Minutes(1), &WarnEachLine);
  return *limiter;
}

void LimitedGrpcLog(gpr_log_func_args* args) {
  const char severity = args->severity == GPR_LOG_SEVERITY_ERROR  ? 'E'
                        : args->severity == GPR_LOG_SEVERITY_INFO ? 'I'
                                                                  : 'D';
  GrpcLimiter().Log(absl::StrCat("[gRPC ", std::string(1, severity), " ", args->file, ":",
                                 args->line, "] ", args->message, "\n"));
}

}  // namespace

void RateLimitProtobufLogs() { google::protobuf::SetLogHandler(&LimitedProtobufLog); }

void RateLimitGrpcLogs() { gpr_set_log_function(&LimitedGrpcLog); }

}  // namespace replicad
