#ifndef REPLICAD_CORE_SERVE_AUTO_PLACEMENT_H_
#define REPLICAD_CORE_SERVE_AUTO_PLACEMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/model/model.h"

namespace replicad {

// `--placement auto`: the model's nodes cut, in their order, into one run per
// context of about equal measured cost, each cut where the fewest bytes cross.

// What a placement weighs per node of a model: the seconds its kernel took
// in one pass (0 for nodes folded away), and the bytes of each value a
// pass at the measured rows holds.
struct NodeCosts {
  int64_t rows = 0;
  std::vector<double> seconds;      // Per node.
  std::vector<size_t> value_bytes;  // Per value.
};

// Times `passes` passes of the whole model at `rows` rows (every other
// dynamic dim 1) on `device` (a slot whose kernels run one after another on
// its stream thread: a CPU slot), each kernel from the moment the plan asks
// for it to the next, and keeps the fastest pass's time per node. Errors as
// Replica::Create's and PlanFor's; Unimplemented for a data-dependent plan.
absl::StatusOr<NodeCosts> MeasureNodeCosts(std::shared_ptr<const Model> model,
                                           std::unique_ptr<Device> device, int64_t rows,
                                           int passes = 3);

// A context per node: nodes [0, c1) on contexts[0], [c1, c2) on contexts[1],
// ..., where each cut ck lies within a tenth of a stage's share of cost from
// k / contexts.size() of the total (the closest cut when none does), and among
// those is the one the fewest bytes cross (values computed before it and read
// after). Every context gets at least one node when there are as many nodes.
// With `memory_limit` > 0, each run's weights (the initializers its nodes
// read) must fit in it: a cut is taken no later than the last that fits, and
// ResourceExhausted names the context and its bytes when none does.
absl::StatusOr<std::vector<std::string>> BalancedContexts(const Graph& graph,
                                                          const NodeCosts& costs,
                                                          const std::vector<std::string>& contexts,
                                                          size_t memory_limit = 0);

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_AUTO_PLACEMENT_H_
