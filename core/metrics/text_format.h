#ifndef REPLICAD_CORE_METRICS_TEXT_FORMAT_H_
#define REPLICAD_CORE_METRICS_TEXT_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/metrics/family.h"

namespace replicad {
namespace metrics {

// The Prometheus text exposition format, version 0.0.4:
// https://prometheus.io/docs/instrumenting/exposition_formats/
// Pure functions; thread-safe as far as the families they read are.

// The Content-Type of a response whose body is in this format.
inline constexpr absl::string_view kTextFormatContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// OK when `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*; InvalidArgument otherwise.
absl::Status ValidateMetricName(absl::string_view name);
// OK when `name` matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with "__"
// (reserved for Prometheus); InvalidArgument otherwise.
absl::Status ValidateLabelName(absl::string_view name);

// Escapes backslash, double quote and newline as \\, \" and \n.
std::string EscapeLabelValue(absl::string_view value);
// Escapes backslash and newline (the HELP line keeps double quotes as is).
std::string EscapeHelp(absl::string_view help);
// A sample value as Prometheus writes one: NaN, +Inf, -Inf, otherwise the
// shortest text that reads back as the same double ("3", "0.25", "1e+21").
std::string FormatValue(double value);

// Append one family: its # HELP and # TYPE lines, then one sample line per
// child (per bucket for histograms, then _sum and _count), children in the
// order Family::ForEach gives.
void AppendFamily(const CounterFamily& family, std::string* out);
void AppendFamily(const GaugeFamily& family, std::string* out);
void AppendFamily(const HistogramFamily& family, std::string* out);

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_TEXT_FORMAT_H_
