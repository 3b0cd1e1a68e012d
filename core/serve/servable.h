#ifndef REPLICAD_CORE_SERVE_SERVABLE_H_
#define REPLICAD_CORE_SERVE_SERVABLE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/device/batch_split.h"
#include "core/model/model.h"

namespace replicad {

// Where the merged outputs go. The sink owns their memory (e.g. the bytes of
// a gRPC response), so the merge writes each slice straight into place.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Host memory for output `index` (model order) of `type`, at least its
  // byte size, valid until the Predict's done runs. Called before any slot runs.
  virtual absl::StatusOr<void*> Allocate(int index, const TensorType& type) = 0;
};

// OK when `slices` cover [0, batch) in order, each on one of `slots` slots
// (Servable::Run's contract); InvalidArgument naming the first that does not.
absl::Status CheckSliceCover(const std::vector<BatchSlice>& slices, int64_t batch, size_t slots);

// One slot of a servable as the serving core reports it.
struct SlotStatus {
  std::string slot;    // Its name, e.g. "r0".
  std::string device;  // e.g. "cuda:1".
  double weight = 1.0;
  absl::Status health;  // Not OK once its device failed for good.
};

// What runs batches of one model version: in the daemon a ReplicaSet, in the
// serving core's tests a fake. Thread-safe: any number of Predicts may be in
// flight.
class Servable {
 public:
  virtual ~Servable() = default;

  // The model as served (inference-optimised graph; its inputs and outputs).
  virtual const Model& model() const = 0;
  virtual std::vector<SlotStatus> Slots() const = 0;
  // Where the slices' outputs are merged, e.g. "cpu:0".
  virtual std::string MergeDevice() const = 0;

  using Done = absl::AnyInvocable<void(absl::Status status, std::vector<BatchSlice> slices) &&>;
  // Asked before each slice starts and then between its kernels; not OK
  // stops the slice there (a slice stopped mid-way reports no seconds) and
  // its status fails the Run. Called on slot threads, once per kernel:
  // thread-safe and cheap.
  using StillWanted = std::function<absl::Status()>;

  // Runs `inputs` (host tensors in model input order, validated, all with the
  // same dim 0 > 0) as `slices`: contiguous, in row order, covering the batch,
  // each on a healthy slot of Slots() (InvalidArgument / Unavailable
  // otherwise). Rank >= 1 outputs are merged at their rows; a rank-0 output
  // is the row-weighted mean of the slices'. Writes every output into `sink`.
  // `done` runs exactly once, on a slot thread, a thread of the servable's
  // own (e.g. one building plans) or before Run returns, with
  // the slices and the seconds each took. A slice whose plans do not fit its
  // slot's memory fails the Run with ResourceExhausted before anything runs
  // or is allocated in `sink`, and is marked `out_of_memory`, so the caller
  // may run the batch again with a smaller share there. `still_wanted` may be null.
  // Must not block: the scheduler calls it on the thread that submitted a
  // request (a protocol's). Work that takes long (building plans, the
  // slices themselves) runs on threads of the servable's own.
  virtual void Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
                   StillWanted still_wanted, Done done) = 0;

  // Frees what the slots keep between runs for the next one (a host slot's
  // activation arena), once the runs queued before have finished; the next
  // run takes it again; and lets the template's weights leave resident
  // memory where a WeightFile holds them. Warm-up calls it: a repository's
  // models then hold one copy of their weights, not a batch's worth of
  // activations each, until used.
  virtual void ReleaseIdleMemory() {}

  // Whether a Run of one slice marked `widened` by its caller, who keeps
  // every other slot idle until it ends (the scheduler), may run with the
  // other slots' cores too (ReplicaSet's wide replica). Run clears the mark
  // of a slice that ran on its slot alone.
  virtual bool LendsIdleCores() const { return false; }

  // Run with the batch split over the healthy slots by their configured
  // weights (SplitBatch); Unavailable when no slot is healthy.
  void Predict(std::vector<Tensor> inputs, OutputSink* sink, Done done);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SERVABLE_H_
