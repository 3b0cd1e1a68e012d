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
  // `parts`: per part, this batch's micro-batches, busy seconds and bytes
  // read from other parts; `seconds`: the batch's wall time through the
  // pipeline (what a part is not busy of it, it waits). Called once at 0 when
  // the pipeline is made, so that its series show before its first batch.
  virtual void OnPipelineRun(const std::string& model,
                             const std::vector<PipelineReplica::PartStats>& parts,
                             double seconds) = 0;
};

// A model served through one PipelineReplica (model parallelism): to the
// scheduler it is one slot, named "pipeline", whose device lists the
// contexts its parts run on ("dev0=cpu:0+dev1=cpu:1"), so every batch goes
// to it whole and runs there in `micro_batches` micro-batches (at most one a
// row). Batches run on threads of its own, two at a time, so one batch's
// first parts overlap another's last. Outputs are copied from the
// pipeline's host tensors into the sink.
class PipelineServable final : public Servable {
 public:
  // `observer` (optional) must outlive the servable.
  PipelineServable(std::unique_ptr<PipelineReplica> pipeline, int micro_batches,
                   std::vector<SlotAssignment> contexts, PipelineObserver* observer = nullptr);
  ~PipelineServable() override;

  const Model& model() const override { return pipeline_->model(); }
  std::vector<SlotStatus> Slots() const override;
  std::string MergeDevice() const override { return "cpu:0"; }
  // InvalidArgument unless `slices` is one slice of slot 0 covering the batch.
  void Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
           StillWanted still_wanted, Done done) override;

  const PipelineReplica& pipeline() const { return *pipeline_; }
  int micro_batches() const { return micro_batches_; }

 private:
  std::unique_ptr<PipelineReplica> pipeline_;
  const int micro_batches_;
  const std::string devices_;
  PipelineObserver* const observer_;
  std::unique_ptr<WorkerPool> runs_;  // Last: joined before the pipeline goes.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PIPELINE_SERVABLE_H_
