#ifndef REPLICAD_SERVER_PIPELINE_METRICS_H_
#define REPLICAD_SERVER_PIPELINE_METRICS_H_

#include <string>
#include <vector>

#include "core/metrics/registry.h"
#include "core/serve/pipeline_servable.h"

namespace replicad {

// The metrics of placed models' pipelines (model parallelism), all prefixed
// replicad_:
//   pipeline_seconds_total{model,pipeline}      counter; wall time of the
//                                               slices through each pipeline
//   pipeline_part_busy_seconds_total{model,pipeline,part,context}
//                                               counter; each part's compute; the
//                                               pipeline's seconds less a part's
//                                               are its bubble (waiting)
//   pipeline_part_received_bytes_total{model,pipeline,part,context}
//                                               counter; values it read from
//                                               other parts
// `pipeline` is the copy's index ("0" for one pipeline), `part` the part's
// index in pipeline order. Series appear at 0 when a placed model loads.
// Thread-safe; the registry must outlive it.
class PipelineMetrics final : public PipelineObserver {
 public:
  explicit PipelineMetrics(metrics::Registry& registry);

  void OnPipelineRun(const std::string& model, int pipeline,
                     const std::vector<PipelineReplica::PartStats>& parts, double seconds) override;

 private:
  metrics::CounterFamily& seconds_;
  metrics::CounterFamily& part_busy_;
  metrics::CounterFamily& part_bytes_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_PIPELINE_METRICS_H_
