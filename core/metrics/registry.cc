#include "core/metrics/registry.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/fatal.h"
#include "core/metrics/text_format.h"

namespace replicad {
namespace metrics {
namespace {

constexpr absl::string_view kCounterSuffix = "_total";

void DieIfError(const absl::Status& status) {
  if (!status.ok()) FatalProgrammerError("metrics", status.message());
}

}  // namespace

Registry::Registry() = default;
Registry::~Registry() = default;

void Registry::CheckAndReserve(absl::string_view name, absl::string_view help,
                               const std::vector<std::string>& label_names,
                               const std::vector<std::string>& sample_names) {
  DieIfError(ValidateMetricName(name));
  if (help.empty()) FatalProgrammerError("metrics", absl::StrCat(name, ": help text is empty"));
  for (size_t i = 0; i < label_names.size(); ++i) {
    DieIfError(ValidateLabelName(label_names[i]));
    if (label_names[i] == "le" || label_names[i] == "quantile") {
      FatalProgrammerError("metrics",
                           absl::StrCat(name, ": label name \"", label_names[i],
                                        "\" is reserved for histogram and summary samples"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (label_names[i] == label_names[j]) {
        FatalProgrammerError("metrics",
                             absl::StrCat(name, ": label name \"", label_names[i], "\" repeats"));
      }
    }
  }
  for (const std::string& sample_name : sample_names) {
    if (used_names_.contains(sample_name)) {
      FatalProgrammerError("metrics", absl::StrCat(name, ": the name ", sample_name,
                                                   " is already used by another family"));
    }
  }
  used_names_.insert(sample_names.begin(), sample_names.end());
}

CounterFamily& Registry::AddCounter(absl::string_view name, absl::string_view help,
                                    std::vector<std::string> label_names) {
  if (!absl::EndsWith(name, kCounterSuffix)) {
    FatalProgrammerError("metrics",
                         absl::StrCat("counter ", name, ": counter names end in _total"));
  }
  absl::MutexLock lock(&mu_);
  CheckAndReserve(name, help, label_names, {std::string(name)});
  auto family =
      std::make_unique<CounterFamily>(std::string(name), std::string(help), std::move(label_names),
                                      [] { return std::make_unique<Counter>(); });
  CounterFamily& result = *family;
  families_.emplace(std::string(name), std::move(family));
  return result;
}

GaugeFamily& Registry::AddGauge(absl::string_view name, absl::string_view help,
                                std::vector<std::string> label_names) {
  if (absl::EndsWith(name, kCounterSuffix)) {
    FatalProgrammerError("metrics",
                         absl::StrCat("gauge ", name, ": only counter names end in _total"));
  }
  absl::MutexLock lock(&mu_);
  CheckAndReserve(name, help, label_names, {std::string(name)});
  auto family =
      std::make_unique<GaugeFamily>(std::string(name), std::string(help), std::move(label_names),
                                    [] { return std::make_unique<Gauge>(); });
  GaugeFamily& result = *family;
  families_.emplace(std::string(name), std::move(family));
  return result;
}

HistogramFamily& Registry::AddHistogram(absl::string_view name, absl::string_view help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  if (absl::EndsWith(name, kCounterSuffix)) {
    FatalProgrammerError("metrics",
                         absl::StrCat("histogram ", name, ": only counter names end in _total"));
  }
  if (absl::Status status = ValidateBucketBounds(bounds); !status.ok()) {
    FatalProgrammerError("metrics", absl::StrCat("histogram ", name, ": ", status.message()));
  }
  absl::MutexLock lock(&mu_);
  CheckAndReserve(name, help, label_names,
                  {std::string(name), absl::StrCat(name, "_bucket"), absl::StrCat(name, "_sum"),
                   absl::StrCat(name, "_count")});
  auto family = std::make_unique<HistogramFamily>(
      std::string(name), std::string(help), std::move(label_names),
      [bounds = std::move(bounds)] { return std::make_unique<Histogram>(bounds); });
  HistogramFamily& result = *family;
  families_.emplace(std::string(name), std::move(family));
  return result;
}

std::string Registry::Render() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) {
    std::visit([&out](const auto& f) { AppendFamily(*f, &out); }, family);
  }
  return out;
}

}  // namespace metrics
}  // namespace replicad
