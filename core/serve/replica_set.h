#ifndef REPLICAD_CORE_SERVE_REPLICA_SET_H_
#define REPLICAD_CORE_SERVE_REPLICA_SET_H_

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  // stream copies the merged outputs out), else null.
  //
  // `wide` (optional): the model on a host slot whose threads are the other
  // slots' cores together. One row cannot be split over slots, but its
  // kernels can use every core: a Run of one slice that its caller marked
  // `widened` (Servable::LendsIdleCores) runs on `wide` instead of its slot.
  // The slots' slices and the wide one never run at the same time (a slice
  // waits for the other kind to end), so the cores are never
  // oversubscribed. The wide replica's plans are built in the background,
  // the first time a marked slice of their shapes came: until then such a
  // slice runs on its slot, and comes back unmarked.
  //
  // InvalidArgument for no replicas, transfer_chunks < 1, a GPU merge
  // device without its stream, or with a slot that is not on a GPU, and for
  // a `wide` replica beside fewer than two slots or any slot, or itself, not
  // in host memory.
  static absl::StatusOr<std::unique_ptr<ReplicaSet>> Create(
      std::shared_ptr<const Model> model, std::vector<std::unique_ptr<Replica>> replicas,
      const Options& options, std::unique_ptr<Device> merge_stream = nullptr,
      std::unique_ptr<Replica> wide = nullptr);

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
  bool LendsIdleCores() const override { return wide_ != nullptr; }
  std::vector<SlotStatus> Slots() const override;
  std::string MergeDevice() const override;
  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  const Replica* wide() const { return wide_.get(); }  // Null without one.
  const DeviceId& merge_device() const { return options_.merge_device; }

 private:
  ReplicaSet(std::shared_ptr<const Model> model, std::vector<std::unique_ptr<Replica>> replicas,
             const Options& options, std::unique_ptr<Device> merge_stream,
             std::unique_ptr<Replica> wide);

  enum class Planned { kAll, kNotCached, kFailed };
  // Fills run.plans, one per slice; with `cached_only`, kNotCached as soon
  // as one is not cached. kFailed once run.done has the error.
  Planned PlanSlices(ReplicaSetRun& run, bool cached_only);
  // Whether `run` (one slice, marked widened) goes to wide_, whose plan for
  // it is cached; when it is not, the answer is no and `to_build` says the
  // shapes to build it for (none when they were refused before).
  bool Widens(const ReplicaSetRun& run, std::optional<std::vector<Shape>>* to_build);
  // Builds wide_'s plan for `shapes` on the planner's thread.
  void BuildWidePlan(std::vector<Shape> shapes);
  // Where slice `s` of `run` runs: its slot's replica, or wide_.
  Replica& RunsOn(const ReplicaSetRun& run, size_t s) const;
  // With run.plans made: the outputs from `sink`, then every slice on its slot.
  void Start(std::shared_ptr<ReplicaSetRun> run, OutputSink* sink, StillWanted still_wanted);
  // Slice `s` of `run` on its replica's stream thread; the last slice to
  // finish ends the Run.
  void RunSlice(const std::shared_ptr<ReplicaSetRun>& run, size_t s,
                const StillWanted& still_wanted);
  // The end of a slice that ran or was refused: the last one ends the Run.
  void SliceEnded(const std::shared_ptr<ReplicaSetRun>& run);

  std::shared_ptr<const Model> model_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  Options options_;
  std::unique_ptr<Device> merge_stream_;  // With a GPU merge device.
  std::unique_ptr<Replica> wide_;         // See Create.
  // With wide_: held shared by a slot's slice while it runs, and whole by a
  // wide slice, on their stream threads. (The scheduler keeps the other slots
  // idle for a widened slice; this is what makes it so when another caller
  // does not.)
  absl::Mutex cores_;
  // A build of a wide plan is queued on planner_ (one at a time), and the
  // shapes whose wide plans could not be built (their slots run them).
  std::atomic<bool> wide_build_queued_{false};
  absl::Mutex wide_mu_;
  std::set<std::vector<Shape>> wide_refused_ ABSL_GUARDED_BY(wide_mu_);
  // Builds plans that were not cached, one Run at a time. Last: its queued
  // builds finish while the replicas are still there.
  WorkerPool planner_{1};
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REPLICA_SET_H_
