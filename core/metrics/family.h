#ifndef REPLICAD_CORE_METRICS_FAMILY_H_
#define REPLICAD_CORE_METRICS_FAMILY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "core/metrics/counter.h"
#include "core/metrics/gauge.h"
#include "core/metrics/histogram.h"

namespace replicad {
namespace metrics {

// One named metric with a fixed list of label names, and one child metric per
// combination of label values, e.g. replicad_requests_total{model,method,code}.
// Families are made by Registry, which validates the names and owns them.
// Thread-safe: WithLabels takes the family's lock; updating the returned
// metric does not.
template <typename Metric>
class Family {
 public:
  // `make` creates a child; called under the family's lock. A family without
  // label names has its only child from the start, so it is exported as 0
  // before the first update.
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::function<std::unique_ptr<Metric>()> make);
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The child for `label_values` (in label_names() order), created at 0 on
  // first use. The reference stays valid for the family's (the registry's)
  // lifetime: look it up once, not per request. A count other than
  // label_names().size() is a programmer error and aborts. Values are
  // arbitrary UTF-8; the text format escapes them.
  Metric& WithLabels(const std::vector<std::string>& label_values);

  // Calls `visit` for every child in ascending order of label values, under
  // the family's lock (so `visit` must not call WithLabels on this family).
  void ForEach(absl::FunctionRef<void(const std::vector<std::string>& label_values, const Metric&)>
                   visit) const;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_FAMILY_H_
