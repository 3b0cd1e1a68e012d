#include "core/serve/auto_placement.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/base/status_macros.h"
#include "core/model/graph_rewrite.h"
#include "core/serve/replica.h"

namespace replicad {

absl::StatusOr<NodeCosts> MeasureNodeCosts(std::shared_ptr<const Model> model,
                                           std::unique_ptr<Device> device, int64_t rows,
                                           int passes) {
  std::vector<Shape> shapes;
  for (const TensorSpec& input : model->inputs()) {
    Shape shape = input.type.shape;
    for (int64_t& d : shape) d = d < 0 ? 1 : d;
    if (!shape.empty()) shape[0] = rows;
    shapes.push_back(std::move(shape));
  }
  const SlotAssignment slot{"placement-measure", device->info().id, 1};
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Replica> replica,
                            Replica::Create(model, slot, std::move(device)));
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<ExecutionPlan> plan, replica->PlanFor(shapes));
  if (plan->data_dependent()) {
    return absl::UnimplementedError(
        "placement auto: the model's plan is data-dependent (shapes computed from values)");
  }
  std::vector<Tensor> buffers;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (const TensorType& type : plan->input_types()) {
    buffers.push_back(Tensor::Host(type.dtype, type.shape));
    std::memset(buffers.back().raw_data(), 0, buffers.back().byte_size());
    inputs.push_back(buffers.back().raw_data());
  }
  for (const TensorType& type : plan->output_types()) {
    buffers.push_back(Tensor::Host(type.dtype, type.shape));
    outputs.push_back(buffers.back().raw_data());
  }
  const Graph& graph = replica->model().graph();
  std::vector<double> fastest(plan->step_count(), std::numeric_limits<double>::infinity());
  absl::Status ran;
  absl::Notification done;
  replica->device().Enqueue([&] {
    for (int pass = 0; pass < passes && ran.ok(); ++pass) {
      std::vector<double> step(plan->step_count(), 0);
      size_t next = 0;
      auto last = std::chrono::steady_clock::now();
      auto mark = [&] {
        const auto now = std::chrono::steady_clock::now();
        if (next > 0) step[next - 1] = std::chrono::duration<double>(now - last).count();
        last = now;
        ++next;
      };
      ran = plan->Run(inputs.data(), outputs.data(), [&] {
        mark();
        return absl::OkStatus();
      });
      mark();  // The last step ends with Run.
      for (size_t i = 0; i < step.size(); ++i) fastest[i] = std::min(fastest[i], step[i]);
    }
    done.Notify();
  });
  done.WaitForNotification();
  REPLICAD_RETURN_IF_ERROR(ran);
  NodeCosts costs;
  costs.rows = rows;
  costs.seconds.assign(graph.nodes.size(), 0);
  for (size_t i = 0; i < plan->step_count(); ++i) {
    const ptrdiff_t n = &plan->step_node(i) - graph.nodes.data();
    if (n >= 0 && n < static_cast<ptrdiff_t>(graph.nodes.size())) costs.seconds[n] += fastest[i];
  }
  costs.value_bytes.assign(graph.values.size(), 0);
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const std::optional<TensorType>& type = plan->value_types()[v];
    if (type.has_value()) costs.value_bytes[v] = ByteSize(*type);
  }
  return costs;
}

namespace {

// weights[c]: bytes of the initializers nodes [first, c) read, each once,
// for c in (first, nodes]; 0 up to first.
std::vector<size_t> RunWeights(const Graph& graph, int64_t first) {
  std::vector<size_t> weights(graph.nodes.size() + 1, 0);
  std::set<int> seen;
  size_t bytes = 0;
  for (size_t n = static_cast<size_t>(first); n < graph.nodes.size(); ++n) {
    for (int v : graph.nodes[n].inputs) {
      auto weight = graph.initializers.find(v);
      if (weight != graph.initializers.end() && seen.insert(v).second) {
        bytes += weight->second.byte_size();
      }
    }
    weights[n + 1] = bytes;
  }
  return weights;
}

// Among cuts [first, last]: those within `window` of `target` cost before
// them, the one the fewest bytes cross (the closer to the target on a tie);
// with none within, the closest.
int64_t BestCut(const std::vector<double>& prefix, const std::vector<double>& crossing,
                int64_t first, int64_t last, double target, double window) {
  int64_t best = first;
  for (int64_t c = first; c <= last; ++c) {
    const double off = std::fabs(prefix[c] - target), best_off = std::fabs(prefix[best] - target);
    const bool in = off <= window, best_in = best_off <= window;
    if ((in && !best_in) || (!in && !best_in && off < best_off) ||
        (in && best_in &&
         (crossing[c] < crossing[best] || (crossing[c] == crossing[best] && off < best_off)))) {
      best = c;
    }
  }
  return best;
}

absl::Status DoesNotFit(const std::string& context, size_t bytes, size_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "placement auto: context '", context, "' would hold ", bytes, " bytes of weights, over its ",
      limit, " bytes (--slot-memory-limit), wherever the cut before it falls"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> BalancedContexts(const Graph& graph,
                                                          const NodeCosts& costs,
                                                          const std::vector<std::string>& contexts,
                                                          size_t memory_limit) {
  const int64_t nodes = static_cast<int64_t>(graph.nodes.size());
  const int64_t k_contexts = static_cast<int64_t>(contexts.size());
  std::vector<double> prefix(nodes + 1, 0);
  for (int64_t n = 0; n < nodes; ++n) prefix[n + 1] = prefix[n] + costs.seconds[n];
  // Bytes crossing the cut before node c: values computed before c, read at or after it.
  const std::vector<int> producer = Producers(graph);
  std::vector<int64_t> last_reader(graph.values.size(), -1);
  for (int64_t n = 0; n < nodes; ++n) {
    for (int v : graph.nodes[n].inputs) {
      if (v >= 0) last_reader[v] = n;
    }
  }
  std::vector<double> crossing(nodes + 2, 0);
  for (size_t v = 0; v < graph.values.size(); ++v) {
    if (producer[v] < 0 || last_reader[v] <= producer[v]) continue;
    crossing[producer[v] + 1] += static_cast<double>(costs.value_bytes[v]);
    crossing[last_reader[v] + 1] -= static_cast<double>(costs.value_bytes[v]);
  }
  for (int64_t c = 1; c <= nodes; ++c) crossing[c] += crossing[c - 1];

  const double total = prefix[nodes];
  const double window = total / static_cast<double>(k_contexts) / 10;
  std::vector<int64_t> cuts = {0};
  for (int64_t k = 1; k < k_contexts; ++k) {
    const double target = total * static_cast<double>(k) / static_cast<double>(k_contexts);
    const int64_t first = std::min(cuts.back() + 1, nodes);
    int64_t last = std::max(first, nodes - (k_contexts - k));
    if (memory_limit > 0) {
      const std::vector<size_t> weights = RunWeights(graph, cuts.back());
      if (weights[first] > memory_limit) {
        return DoesNotFit(contexts[k - 1], weights[first], memory_limit);
      }
      while (last > first && weights[last] > memory_limit) --last;
    }
    cuts.push_back(BestCut(prefix, crossing, first, last, target, window));
  }
  if (memory_limit > 0) {
    const size_t last_run = RunWeights(graph, cuts.back())[nodes];
    if (last_run > memory_limit) return DoesNotFit(contexts.back(), last_run, memory_limit);
  }
  cuts.push_back(nodes);
  std::vector<std::string> context_of(nodes);
  for (int64_t k = 0; k < k_contexts; ++k) {
    for (int64_t n = cuts[k]; n < cuts[k + 1]; ++n) context_of[n] = contexts[k];
  }
  return context_of;
}

}  // namespace replicad
