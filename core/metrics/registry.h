#ifndef REPLICAD_CORE_METRICS_REGISTRY_H_
#define REPLICAD_CORE_METRICS_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/metrics/family.h"
#include "core/metrics/histogram.h"

namespace replicad {
namespace metrics {

// Owns every metric family of the process and renders them in the Prometheus
// text format. Create families at startup, cache the children's references
// (they live as long as the registry), update them from any thread.
//
// Names are fixed in code, so a bad one is a programmer error: the Add*
// methods abort (see fatal.h) with a message naming the problem when
//  - `name` does not match [a-zA-Z_:][a-zA-Z0-9_:]*, or `help` is empty;
//  - a counter's name does not end in "_total", or a gauge's or histogram's does;
//  - a label name is invalid, starts with "__", repeats, or is "le" or
//    "quantile" (reserved for histogram and summary samples);
//  - the name, or a sample name it produces (a histogram's name_bucket,
//    name_sum, name_count), is already used by another family;
//  - histogram bounds fail ValidateBucketBounds.
//
// Thread-safe: Add* and Render lock the registry; Render also locks each family
// briefly. Updates never lock. Neither copyable nor movable.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  CounterFamily& AddCounter(absl::string_view name, absl::string_view help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(absl::string_view name, absl::string_view help,
                        std::vector<std::string> label_names = {});
  // `bounds`: finite, strictly increasing bucket upper bounds; +Inf is implied.
  HistogramFamily& AddHistogram(absl::string_view name, absl::string_view help,
                                std::vector<std::string> label_names = {},
                                std::vector<double> bounds = DefaultLatencyBuckets());

  // Every family in ascending order of name, each with # HELP and # TYPE lines;
  // within a family, children in ascending order of label values. Stable
  // output for unchanged values.
  std::string Render() const;

 private:
  using AnyFamily = std::variant<std::unique_ptr<CounterFamily>, std::unique_ptr<GaugeFamily>,
                                 std::unique_ptr<HistogramFamily>>;

  // Aborts unless `name` and `label_names` may be added (see above); then
  // reserves `sample_names`.
  void CheckAndReserve(absl::string_view name, absl::string_view help,
                       const std::vector<std::string>& label_names,
                       const std::vector<std::string>& sample_names)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, AnyFamily, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> used_names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metrics
}  // namespace replicad

#endif  // REPLICAD_CORE_METRICS_REGISTRY_H_
