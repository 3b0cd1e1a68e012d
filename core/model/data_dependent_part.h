#ifndef REPLICAD_CORE_MODEL_DATA_DEPENDENT_PART_H_
#define REPLICAD_CORE_MODEL_DATA_DEPENDENT_PART_H_

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"
#include "core/model/graph.h"

namespace replicad {

// The part of an execution plan that can only run once a request's values
// are known: nodes whose output shape is their result (NonZero,
// NonMaxSuppression, an If's choice), nodes whose shape rule reads a value
// computed from the request (TopK's K, Range's limit, Reshape's shape), the
// nodes of an If's branches whose condition the request decides, and every
// node that reads what those compute. A detection model's post-processing
// is such a part; its backbone is not, and stays in the plan's kernels.
//
// The part runs after the plan's kernels, node by node on host values, as
// constant folding would with the request's values (and guards skip the
// branches not taken). Each node's kernel is made on `host` (the slot's
// Device::host_folding_device) and kept: a request whose types and shape
// values (the inputs the op's shape rule reads) at a node are the last
// request's runs the kernel it already has, so no plan is rebuilt per
// request. The kernels run on the calling thread (the slot's), holding
// HostFoldingMutex for the whole run: a hand-over to the host device's
// thread per node cost 5 microseconds, 7.5 ms of ssdlite's 1478 nodes. Not
// thread-safe: one Run at a time, as the plan's.
// Held by whoever runs kernels of a host folding device (one per process,
// shared by every slot): a plan folding a node there, a part running its
// nodes. Its kernels share that device's scratch memory, so one user at a
// time.
absl::Mutex& HostFoldingMutex();

class DataDependentPart {
 public:
  DataDependentPart(const Graph& graph, Device& host);
  ~DataDependentPart();
  DataDependentPart(const DataDependentPart&) = delete;
  DataDependentPart& operator=(const DataDependentPart&) = delete;

  // Planning, in graph order: a node of the part, and a value it reads that
  // the plan knows when it is made (kept by the plan; outlives the part).
  void AddNode(const Node& node);
  void AddKnown(int value, const Tensor* host);
  size_t node_count() const { return nodes_.size(); }

  // Runs the nodes. `values`, indexed by value, holds the host tensor of
  // every value the plan's kernels computed that the part reads (and of the
  // graph's inputs it reads); the part adds what it computes. `proceed`
  // (optional) is asked before each node, as ExecutionPlan::Proceed. Errors
  // name the node; a node's output over 4 GiB (shapes a request decides) is
  // ResourceExhausted before anything is allocated.
  using Proceed = absl::FunctionRef<absl::Status()>;
  absl::Status Run(std::vector<std::optional<Tensor>>* values, const Proceed* proceed);

 private:
  struct CachedKernel;
  // Whether `node` runs, by its guards and the values computed so far.
  absl::StatusOr<bool> Taken(const Node& node, const std::vector<std::optional<Tensor>>& values);
  absl::StatusOr<std::vector<Tensor>> Evaluate(size_t index,
                                               const std::vector<std::optional<Tensor>>& values);

  const Graph& graph_;
  Device& host_;
  std::vector<const Node*> nodes_;
  std::map<int, const Tensor*> known_;
  std::vector<std::unique_ptr<CachedKernel>> kernels_;  // One slot per node.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_DATA_DEPENDENT_PART_H_
