#ifndef REPLICAD_CORE_SERVE_REPLICA_SET_H_
#define REPLICAD_CORE_SERVE_REPLICA_SET_H_

#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/base/worker_pool.h"
#include "core/device/batch_split.h"
#include "core/serve/replica.h"
#include "core/serve/servable.h"

namespace replicad {

// Told about every slice a slot ran (for metrics). Called on slot threads.
class SliceObserver {
 public:
  virtual ~SliceObserver() = default;
  virtual void OnSliceRun(const Replica& replica, int64_t rows, double busy_seconds) = 0;
  // A slice on `replica` needed `count` plans its cache did not hold; they
  // were built before it ran, taking `seconds` (time its request waited).
  virtual void OnPlansBuilt(const Replica& replica, int count, double seconds) = 0;
};

struct ReplicaSetRun;  // One Run in flight (replica_set.cc).

// The template's replicas, one per slot, and the split/run/merge of a batch
// across them. Thread-safe: any number of Runs may be in flight; each slot
// runs its slices in the order their Runs start them (a Run whose plans are
// being built starts after those whose plans were cached).
class ReplicaSet final : public Servable {
 public:
  struct Options {
    // Where the slices' outputs meet: cpu (pinned or pageable host memory,
    // the response's own bytes), or a GPU (cuda:N), whose memory the GPU
    // slots write by peer copy before one copy to the response.
    DeviceId merge_device;
    SliceObserver* observer = nullptr;  // Optional; must outlive the set.
    // The most chunks a GPU slot cuts its slice into so that transfers
    // overlap compute (Replica::PlanSlice); 1 runs every slice whole.
    int transfer_chunks = 4;
    size_t min_chunk_bytes = Replica::kMinChunkBytes;  // See Replica::PlanSlice.
    // A slot that cannot hold a slice's plans retries with smaller chunks
    // (Replica::ChunkOptions::shrink_on_oom) instead of RESOURCE_EXHAUSTED.
    bool shrink_on_oom = false;
  };

  // `merge_stream` is a slot on the merge device when that is a GPU (its
  // stream copies the merged outputs out), else null. InvalidArgument for
  // no replicas, transfer_chunks < 1, a GPU merge device without its
  // stream, or with a slot that is not on a GPU.
  static absl::StatusOr<std::unique_ptr<ReplicaSet>> Create(
      std::shared_ptr<const Model> model, std::vector<std::unique_ptr<Replica>> replicas,
      const Options& options, std::unique_ptr<Device> merge_stream = nullptr);

  // Servable::Run: each slice runs on its slot's stream (slices of one slot
  // in order), reading the request's rows in host memory; rank >= 1 outputs
  // are written at their row offset (in the merge device's memory, then the
  // sink's). With every slice's plans cached it starts them from the calling
  // thread; otherwise it returns at once and a thread of the set's builds
  // them first (kernels themselves are made on each slot's thread), so a
  // caller never waits for a plan build.
  void ReleaseIdleMemory() override;
  void Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
           StillWanted still_wanted, Done done) override;

  const Model& model() const override { return *model_; }
  std::vector<SlotStatus> Slots() const override;
  std::string MergeDevice() const override;
  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  const DeviceId& merge_device() const { return options_.merge_device; }

 private:
  ReplicaSet(std::shared_ptr<const Model> model, std::vector<std::unique_ptr<Replica>> replicas,
             const Options& options, std::unique_ptr<Device> merge_stream);

  enum class Planned { kAll, kNotCached, kFailed };
  // Fills run.plans, one per slice; with `cached_only`, kNotCached as soon
  // as one is not cached. kFailed once run.done has the error.
  Planned PlanSlices(ReplicaSetRun& run, bool cached_only);
  // With run.plans made: the outputs from `sink`, then every slice on its slot.
  void Start(std::shared_ptr<ReplicaSetRun> run, OutputSink* sink, StillWanted still_wanted);
  // Slice `s` of `run` on its slot's stream thread; the last slice to finish
  // ends the Run.
  void RunSlice(const std::shared_ptr<ReplicaSetRun>& run, size_t s, Replica& replica,
                const StillWanted& still_wanted);

  std::shared_ptr<const Model> model_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  Options options_;
  std::unique_ptr<Device> merge_stream_;  // With a GPU merge device.
  // Builds plans that were not cached, one Run at a time. Last: its queued
  // builds finish while the replicas are still there.
  WorkerPool planner_{1};
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REPLICA_SET_H_
