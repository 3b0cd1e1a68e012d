#include "server/pipeline_metrics.h"

namespace replicad {

PipelineMetrics::PipelineMetrics(metrics::Registry& registry)
    : seconds_(registry.AddCounter(
          "replicad_pipeline_seconds_total",
          "Wall time of a placed model's batches through each of its pipelines (model "
          "parallelism).",
          {"model", "pipeline"})),
      part_busy_(registry.AddCounter(
          "replicad_pipeline_part_busy_seconds_total",
          "Seconds each part of a placed model's pipeline computed; the pipeline's seconds less "
          "these are its bubble.",
          {"model", "pipeline", "part", "context"})),
      part_bytes_(
          registry.AddCounter("replicad_pipeline_part_received_bytes_total",
                              "Bytes of values each part of a placed model read from other parts.",
                              {"model", "pipeline", "part", "context"})) {}

void PipelineMetrics::OnPipelineRun(const std::string& model, int pipeline,
                                    const std::vector<PipelineReplica::PartStats>& parts,
                                    double seconds) {
  const std::string copy = std::to_string(pipeline);
  seconds_.WithLabels({model, copy}).Increment(seconds);
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::vector<std::string> labels = {model, copy, std::to_string(p), parts[p].context};
    part_busy_.WithLabels(labels).Increment(parts[p].busy_seconds);
    part_bytes_.WithLabels(labels).Increment(static_cast<double>(parts[p].bytes_in));
  }
}

}  // namespace replicad
