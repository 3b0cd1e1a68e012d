#include "core/metrics/text_format.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace replicad {
namespace metrics {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendHeader(const std::string& name, const std::string& help, absl::string_view type,
                  std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", EscapeHelp(help), "\n", "# TYPE ", name, " ", type,
                  "\n");
}

// `extra_name`/`extra_value` is the histogram's `le`, which must come after the
// family's own labels; empty when there is none.
void AppendSample(absl::string_view name, absl::string_view suffix,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, absl::string_view extra_name,
                  absl::string_view extra_value, absl::string_view value, std::string* out) {
  absl::StrAppend(out, name, suffix);
  if (!label_names.empty() || !extra_name.empty()) {
    out->push_back('{');
    for (size_t i = 0; i < label_names.size(); ++i) {
      if (i > 0) out->push_back(',');
      absl::StrAppend(out, label_names[i], "=\"", EscapeLabelValue(label_values[i]), "\"");
    }
    if (!extra_name.empty()) {
      if (!label_names.empty()) out->push_back(',');
      absl::StrAppend(out, extra_name, "=\"", extra_value, "\"");
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", value, "\n");
}

}  // namespace

absl::Status ValidateMetricName(absl::string_view name) {
  bool ok = !name.empty() && (IsNameStart(name[0]) || name[0] == ':');
  for (size_t i = 1; ok && i < name.size(); ++i) {
    ok = IsNameStart(name[i]) || IsDigit(name[i]) || name[i] == ':';
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid metric name \"", name, "\": must match [a-zA-Z_:][a-zA-Z0-9_:]*"));
}

absl::Status ValidateLabelName(absl::string_view name) {
  bool ok = !name.empty() && IsNameStart(name[0]);
  for (size_t i = 1; ok && i < name.size(); ++i) ok = IsNameStart(name[i]) || IsDigit(name[i]);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid label name \"", name, "\": must match [a-zA-Z_][a-zA-Z0-9_]*"));
  }
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid label name \"", name, "\": names starting with __ are reserved"));
  }
  return absl::OkStatus();
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip digits; positional below 1e21 like Go's and
  // JavaScript's defaults, so counts read as "1234567", not "1.234567e+06".
  char buffer[64];
  std::to_chars_result scientific =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  *scientific.ptr = '\0';  // 64 bytes leave room; atoi needs the terminator.
  const char* e = buffer;
  while (*e != 'e') ++e;
  const int exponent = std::atoi(e + 1);
  if (exponent < -4 || exponent >= 21) return std::string(buffer, scientific.ptr);
  std::to_chars_result fixed =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed);
  return std::string(buffer, fixed.ptr);
}

void AppendFamily(const CounterFamily& family, std::string* out) {
  AppendHeader(family.name(), family.help(), "counter", out);
  family.ForEach([&](const std::vector<std::string>& values, const Counter& counter) {
    AppendSample(family.name(), "", family.label_names(), values, "", "",
                 FormatValue(counter.Value()), out);
  });
}

void AppendFamily(const GaugeFamily& family, std::string* out) {
  AppendHeader(family.name(), family.help(), "gauge", out);
  family.ForEach([&](const std::vector<std::string>& values, const Gauge& gauge) {
    AppendSample(family.name(), "", family.label_names(), values, "", "",
                 FormatValue(gauge.Value()), out);
  });
}

void AppendFamily(const HistogramFamily& family, std::string* out) {
  AppendHeader(family.name(), family.help(), "histogram", out);
  const std::vector<std::string>& names = family.label_names();
  family.ForEach([&](const std::vector<std::string>& values, const Histogram& histogram) {
    const Histogram::Snapshot snapshot = histogram.Read();
    const std::vector<double>& bounds = histogram.bounds();
    for (size_t i = 0; i <= bounds.size(); ++i) {
      const std::string le = i < bounds.size() ? FormatValue(bounds[i]) : "+Inf";
      AppendSample(family.name(), "_bucket", names, values, "le", le,
                   absl::StrCat(snapshot.cumulative_counts[i]), out);
    }
    AppendSample(family.name(), "_sum", names, values, "", "", FormatValue(snapshot.sum), out);
    AppendSample(family.name(), "_count", names, values, "", "", absl::StrCat(snapshot.count), out);
  });
}

}  // namespace metrics
}  // namespace replicad
