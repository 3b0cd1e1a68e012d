#include "core/metrics/family.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/fatal.h"

namespace replicad {
namespace metrics {

template <typename Metric>
Family<Metric>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                       std::function<std::unique_ptr<Metric>()> make)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      make_(std::move(make)) {
  if (label_names_.empty()) {
    absl::MutexLock lock(&mu_);
    children_.emplace(std::vector<std::string>(), make_());
  }
}

template <typename Metric>
Metric& Family<Metric>::WithLabels(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    FatalProgrammerError("metrics",
                         absl::StrCat(name_, " has labels {", absl::StrJoin(label_names_, ","),
                                      "} but WithLabels got ", label_values.size(), " values {",
                                      absl::StrJoin(label_values, ","), "}"));
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Metric>& child = children_[label_values];
  if (child == nullptr) child = make_();
  return *child;
}

template <typename Metric>
void Family<Metric>::ForEach(
    absl::FunctionRef<void(const std::vector<std::string>&, const Metric&)> visit) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [label_values, child] : children_) visit(label_values, *child);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

}  // namespace metrics
}  // namespace replicad
