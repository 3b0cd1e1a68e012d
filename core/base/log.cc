#include "core/base/log.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "spdlog/logger.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace replicad {
namespace {

enum class Level { kInfo, kWarning, kError, kVerbose };

std::atomic<LogFormat> configured_format{LogFormat::kText};
std::atomic<int> configured_verbose{0};

// spdlog's console sinks take a lock per line and flush it (flush_on), so
// lines of concurrent threads never interleave; the line itself is composed
// here, where the JSON escaping is.
spdlog::logger* MakeLogger(const char* name, spdlog::sink_ptr sink) {
  auto* logger = new spdlog::logger(name, std::move(sink));  // Lives as long as the process.
  logger->set_pattern("%v");
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::trace);
  return logger;
}

spdlog::logger& Stdout() {
  static spdlog::logger* const logger =
      MakeLogger("stdout", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  return *logger;
}

spdlog::logger& Stderr() {
  static spdlog::logger* const logger =
      MakeLogger("stderr", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  return *logger;
}

// Length of the well-formed UTF-8 sequence at text[i], or 0.
size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (length == 0 || lead > 0xF4 || i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return length;
}

// A JSON string literal of `text`. Messages carry client-chosen names, so
// control characters are escaped and bytes that are not UTF-8 become U+FFFD:
// a collector must never be handed a line it cannot parse.
std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", text.substr(i, 1));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text, i);
      if (length == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(text.data() + i, length);
      i += length;
      continue;
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
  out += "\"";
  return out;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      return "error";
    case Level::kVerbose:
      return "verbose";
  }
  return "info";
}

void Write(Level level, int verbose_level, absl::string_view message) {
  if (configured_format.load(std::memory_order_relaxed) == LogFormat::kJson) {
    std::string line = absl::StrCat(
        "{\"time\":\"", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone()),
        "\",\"level\":\"", LevelName(level), "\"");
    if (level == Level::kVerbose) absl::StrAppend(&line, ",\"verbose\":", verbose_level);
    absl::StrAppend(&line, ",\"message\":", JsonString(message), "}");
    Stdout().info(line);
    return;
  }
  if (level == Level::kWarning) {
    Stderr().info(absl::StrCat("replicad: WARNING: ", message));
  } else if (level == Level::kError) {
    Stderr().info(absl::StrCat("replicad: ", message));
  } else {
    Stdout().info(absl::StrCat("replicad: ", message));
  }
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view value) {
  if (value == "text") return LogFormat::kText;
  if (value == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log-format: expected text or json, got \"", value, "\""));
}

void ConfigureLog(LogFormat format, int verbose_level) {
  configured_format.store(format);
  configured_verbose.store(verbose_level);
}

void LogInfo(absl::string_view message) { Write(Level::kInfo, 0, message); }
void LogWarning(absl::string_view message) { Write(Level::kWarning, 0, message); }
void LogError(absl::string_view message) { Write(Level::kError, 0, message); }

bool VerboseLogOn(int level) { return level <= configured_verbose.load(std::memory_order_relaxed); }

void LogVerbose(int level, absl::string_view message) {
  if (VerboseLogOn(level)) Write(Level::kVerbose, level, message);
}

}  // namespace replicad
