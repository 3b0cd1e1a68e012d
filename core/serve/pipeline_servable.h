#ifndef REPLICAD_CORE_SERVE_PIPELINE_SERVABLE_H_
#define REPLICAD_CORE_SERVE_PIPELINE_SERVABLE_H_

#include <memory>
#include <string>
#include <vector>

#include "core/base/worker_pool.h"
#include "core/serve/pipeline_replica.h"
#include "core/serve/servable.h"

namespace replicad {

// Told what the parts of a pipeline did for each batch (the metrics).
class PipelineObserver {
 public:
  virtual ~PipelineObserver() = default;
  // `pipeline`: which of the model's pipelines ran (0 for the first);
  // `parts`: per part, this slice's micro-batches, busy seconds and bytes
  // read from other parts; `seconds`: the slice's wall time through the
  // pipeline (what a part is not busy of it, it waits). Called once at 0 per
  // pipeline when it is made, so that its series show before its first batch.
  virtual void OnPipelineRun(const std::string& model, int pipeline,
                             const std::vector<PipelineReplica::PartStats>& parts,
                             double seconds) = 0;
};

// A model served through PipelineReplicas (model parallelism), one per
// copy of the contexts (a device map listing several devices per context):
// to the scheduler each pipeline is one slot, named "pipeline" (one copy)
// or "pipeline0", "pipeline1", ..., whose device lists the contexts its
// parts run on ("dev0=cpu:0+dev1=cpu:1"). The scheduler splits a batch over
// the pipelines as over any replicas (data parallelism over pipelines), and
// each slice runs through its pipeline in `micro_batches` micro-batches (at
// most one a row). Slices run on threads of the servable's own, two per
// pipeline, so one batch's first parts overlap another's last. Outputs are
// copied from the pipelines' host tensors into the sink at their rows. A pipeline is
// healthy while every part's slot is (PipelineReplica::health); an unhealthy
// one gets no slices.
class PipelineServable final : public Servable {
 public:
  // `contexts[k]`: the slots of pipeline k by context name (the device
  // strings). `observer` (optional) must outlive the servable.
  PipelineServable(std::vector<std::unique_ptr<PipelineReplica>> pipelines, int micro_batches,
                   const std::vector<std::vector<SlotAssignment>>& contexts,
                   PipelineObserver* observer = nullptr);
  ~PipelineServable() override;

  const Model& model() const override { return pipelines_[0]->model(); }
  std::vector<SlotStatus> Slots() const override;
  std::string MergeDevice() const override { return "cpu:0"; }
  // CheckSliceCover's errors; Unavailable for a slice of an unhealthy pipeline.
  void Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
           StillWanted still_wanted, Done done) override;

  size_t pipeline_count() const { return pipelines_.size(); }
  const PipelineReplica& pipeline(size_t k = 0) const { return *pipelines_[k]; }
  int micro_batches() const { return micro_batches_; }

 private:
  struct BatchRun;
  // "pipeline" for one, "pipeline<k>" among several.
  std::string SlotName(size_t k) const;
  // Slice `i` of `run` through its pipeline, on a thread of runs_; the last
  // slice to end writes the outputs and calls done.
  void RunSlice(const std::shared_ptr<BatchRun>& run, size_t i);
  void Finish(BatchRun& run);

  std::vector<std::unique_ptr<PipelineReplica>> pipelines_;
  const int micro_batches_;
  std::vector<std::string> devices_;  // Per pipeline.
  PipelineObserver* const observer_;
  std::unique_ptr<WorkerPool> runs_;  // Last: joined before the pipelines go.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PIPELINE_SERVABLE_H_
