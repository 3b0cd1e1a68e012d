#ifndef REPLICAD_CORE_SERVE_PIPELINE_REPLICA_H_
#define REPLICAD_CORE_SERVE_PIPELINE_REPLICA_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/device/run_context.h"
#include "core/model/model.h"
#include "core/model/placement.h"
#include "core/serve/replica.h"
#include "core/tensor/tensor.h"

namespace replicad {

// How a PipelineReplica treats its inputs and outputs, and its memory bound.
struct PipelineReplicaOptions {
  // > 0: the weights placed on one context may take at most that many
  // bytes (ResourceExhausted naming the context, its bytes and the limit).
  size_t slot_memory_limit = 0;
  // By model input: passed whole to every micro-batch instead of cut by
  // rows (a training graph's parameters). Empty: every input is cut.
  std::vector<bool> whole_inputs;
  // Outputs summed over the micro-batches (float32) instead of stacked by
  // rows: a training graph's loss and gradient sums.
  bool sum_outputs = false;
};

// One copy of a model spread over several slots (model parallelism,
// placement.h): each part of the placed graph is a Replica of its own on a
// slot of its context, holding only the weights its nodes read. A batch runs
// in micro-batches that flow through the parts as GPipe schedules them:
// each part takes micro-batch i once the parts it reads from are done with
// it and it is done with i - 1, so part k works on i while part k + 1 works
// on i - 1, and parts that do not read from each other (independent
// branches) run at the same time. Values crossing parts go through host
// memory, once each (a CPU slot reads them in place; a GPU slot copies them
// in and out as for any request). Each row's answer is what one slot
// computes for the same micro-batch, bit for bit: the parts run the same
// kernels on the same shapes as the whole model's plan would.
//
// Thread-safe: Run may be called from several threads; their micro-batches
// queue on the parts' slots.
class PipelineReplica {
 public:
  // Makes the slot (its Device) of one part, on `context`'s device. Parts
  // that share a context get one each.
  using DeviceMaker =
      std::function<absl::StatusOr<std::unique_ptr<Device>>(const SlotAssignment& context)>;

  using Options = PipelineReplicaOptions;

  // `contexts`: the device map's slots by name; every part's context must be
  // one (InvalidArgument naming it otherwise). Plans each part once at one
  // row, so that every value handed over has its element type (errors name
  // the node, as ExecutionPlan's).
  static absl::StatusOr<std::unique_ptr<PipelineReplica>> Create(
      std::shared_ptr<const Model> model, PlacedGraph placed,
      const std::vector<SlotAssignment>& contexts, const DeviceMaker& make_device,
      Options options = {});

  ~PipelineReplica();

  const Model& model() const { return *model_; }
  size_t part_count() const { return parts_.size(); }
  const std::string& part_context(size_t part) const;
  // Bytes of weights held on each context, by context name.
  const std::map<std::string, size_t>& weight_bytes() const { return weight_bytes_; }

  // Runs `inputs` (host tensors in the model's input order, rows in dim 0
  // but for Options::whole_inputs) in `micro_batches` micro-batches of equal
  // rows (the last may have fewer; at most one per row) and returns the
  // outputs (host tensors; summed over the micro-batches with
  // Options::sum_outputs). InvalidArgument for inputs that do not match the
  // model's (count, dtype, rows) or micro_batches < 1; Unimplemented for a
  // model whose plan is data-dependent, an output that does not keep the
  // rows in dim 0 (or, summed, is not float32); a
  // part's error names its context and the node. Must not be called on a
  // slot's stream thread. With `this_run`, what each part did for this batch
  // (PartStats, one per part, in part order).
  struct PartStats {
    std::string context;
    uint64_t runs = 0;        // Micro-batches run.
    double busy_seconds = 0;  // Computing them.
    uint64_t bytes_in = 0;    // Of values read from other parts.
  };
  // With `still_wanted`, each part asks it before each micro-batch (on its
  // slot's thread; thread-safe and cheap): an error stops the batch there,
  // the parts after it do not run, and Run returns that error (a deadline's,
  // a cancellation's).
  // With `step`, every kernel runs in that training step's context (a
  // training graph's Dropout masks are keyed by it), each micro-batch's
  // first_row offset by its first row.
  absl::StatusOr<std::vector<Tensor>> Run(
      const std::vector<Tensor>& inputs, int micro_batches,
      std::vector<PartStats>* this_run = nullptr,
      const std::function<absl::Status()>* still_wanted = nullptr,
      const RunContext* step = nullptr);

  // What each part did since Create.
  std::vector<PartStats> Stats() const;

  // OK while every part's slot can run work; otherwise the first failed
  // one's Device::health, naming its context. A pipeline missing a part
  // cannot run at all.
  absl::Status health() const;

 private:
  struct Part;
  struct MicroBatch;

  PipelineReplica(std::shared_ptr<const Model> model, PlacedGraph placed, Options options);
  bool Whole(int value) const;  // Whether `value` is a model input passed whole.
  // The rows of the first input cut by rows; -1 without one.
  int64_t BatchRows(const std::vector<Tensor>& inputs) const;
  // Plans every part for micro-batches of `rows` rows.
  absl::StatusOr<std::vector<std::shared_ptr<ExecutionPlan>>> PlansFor(
      const std::vector<Tensor>& inputs, int64_t rows) const;
  absl::Status CheckInputs(const std::vector<Tensor>& inputs, int micro_batches) const;
  // The outputs of a batch of `rows` rows, as the plans for micro-batches of
  // `chunk` rows type them.
  absl::StatusOr<std::vector<Tensor>> WholeOutputs(
      const std::vector<std::shared_ptr<ExecutionPlan>>& plans, int64_t chunk, int64_t rows) const;
  // Part `p` on micro-batch `run`, on its slot's stream thread: waits for the
  // parts it reads from, runs, and says it is done (also when it failed).
  void RunPart(size_t p, MicroBatch* run, const std::vector<Tensor>& inputs,
               const std::function<absl::Status()>* still_wanted);

  std::shared_ptr<const Model> model_;
  PlacedGraph placed_;
  Options options_;
  std::vector<std::unique_ptr<Part>> parts_;
  std::map<std::string, size_t> weight_bytes_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PIPELINE_REPLICA_H_
