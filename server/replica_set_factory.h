#ifndef REPLICAD_SERVER_REPLICA_SET_FACTORY_H_
#define REPLICAD_SERVER_REPLICA_SET_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backends/backends.h"
#include "core/device/device_map.h"
#include "core/model/compute_precision.h"
#include "core/serve/pipeline_servable.h"
#include "core/serve/replica_set.h"
#include "core/serve/scheduler_options.h"
#include "core/train/model_trainer.h"

namespace replicad {

struct ServingOptions {
  std::vector<SlotAssignment> slots;  // The same slots for every model.
  SlotOptions slot_options;
  DeviceId merge_device;
  int transfer_chunks = 4;
  bool shrink_on_oom = false;
  // Plans each replica caches (Replica::Create's max_plans), and the plan
  // memory it may hold (max_plan_bytes; 0: PlanMemoryPerSlot's default).
  size_t max_plans_per_slot = Replica::kDefaultMaxPlans;
  size_t plan_memory_per_slot = 0;
  // Where models keep their large weights in files of their own (see
  // core/model/weight_file.h); empty: in anonymous memory.
  std::string weight_file_dir;
  // What float32 models compute their products in (core/model/compute_precision.h).
  ComputePrecision precision = ComputePrecision::kFloat32;
  int64_t max_batch_size = 0;  // 0: no limit.
  // How models without a config.pbtxt are scheduled (--dynamic-batching and
  // the queue flags); a config.pbtxt's model takes only max_queue_bytes and
  // measured_weights from here. Its max_batch_size is not read.
  SchedulerOptions scheduling;
  // Model parallelism (core/model/placement.h): with rules, the model's
  // nodes are placed over `slots` (by their names, the contexts) and it is
  // served by one pipeline in `micro_batches` micro-batches (0: four per
  // part); `placement_field` names where the rules came from, for errors.
  std::string placement;
  std::string placement_field = "--placement";
  int micro_batches = 0;
  // The most bytes of weights one slot (or one context of a placement) may
  // hold; 0: no bound. For sharing a device, and for testing placements.
  size_t slot_memory_limit = 0;
};

// The plan memory a slot may cache by default: a quarter of its device's
// memory (host RAM for CPU slots), shared by the slots `slots` places there.
size_t DefaultPlanMemoryPerSlot(const DeviceInfo& device, const std::vector<SlotAssignment>& slots);

// `model`'s replicas on the configured slots (a new device stream each) and
// the set that splits batches over them (with a GPU merge device, one more
// stream there). InvalidArgument naming a slot or merge device that is not
// among `devices`; the device's, the replica's or the set's error otherwise.
// ResourceExhausted naming the slot and the bytes when the model's weights
// exceed options.slot_memory_limit.
absl::StatusOr<std::unique_ptr<ReplicaSet>> BuildReplicaSet(std::shared_ptr<const Model> model,
                                                            const std::vector<DeviceInfo>& devices,
                                                            const ServingOptions& options,
                                                            SliceObserver* observer);

// What serves `model`: with options.placement, a PipelineServable of its
// parts over the slots ("auto": cut by measured cost, auto_placement.h;
// errors: the rules', PlaceGraph's and
// PipelineReplica::Create's, naming options.placement_field); otherwise
// BuildReplicaSet's.
// `pipelines` (optional) hears what a pipeline's parts did (the metrics).
absl::StatusOr<std::unique_ptr<Servable>> BuildServable(std::shared_ptr<const Model> model,
                                                        const std::vector<DeviceInfo>& devices,
                                                        const ServingOptions& options,
                                                        SliceObserver* observer,
                                                        PipelineObserver* pipelines = nullptr);

// The trainer of a placed model (options.placement set): a PipelineTrainer
// over the same contexts, its training graph placed by the same rules (or,
// "auto", a cut of the training model measured as BuildServable measures);
// null without a placement (the model trains data-parallel).
ModelTrainerMaker PlacedModelTrainer(const std::vector<DeviceInfo>& devices,
                                     const ServingOptions& options);

}  // namespace replicad

#endif  // REPLICAD_SERVER_REPLICA_SET_FACTORY_H_
