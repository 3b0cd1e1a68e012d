#include "server/replica_set_factory.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/model/placement.h"
#include "core/serve/auto_placement.h"
#include "core/serve/pipeline_servable.h"
#include "core/serve/pipeline_trainer.h"

namespace replicad {

size_t DefaultPlanMemoryPerSlot(const DeviceInfo& device,
                                const std::vector<SlotAssignment>& slots) {
  size_t here = 0;
  for (const SlotAssignment& slot : slots) here += slot.device == device.id ? 1 : 0;
  return static_cast<size_t>(device.memory_bytes / 4 / std::max<size_t>(here, 1));
}

namespace {

// The threads of a wide replica for `slots` (ReplicaSet::Create): their
// cores together, at most the machine's; 0 for none. Only beside CPU slots of
// one thread: slots of more keep their OpenMP teams between passes, and with
// a wide team too, libgomp counts more threads than cores and stops
// spinning between parallel regions, which slows every team (see
// docs/serving.md, "Idle cores lent to one row").
int WideThreads(const std::vector<SlotAssignment>& slots, const std::vector<DeviceInfo>& devices,
                const SlotOptions& options) {
  if (!options.lend_idle_cores || options.threads_per_slot != 1 || slots.size() < 2) return 0;
  for (const SlotAssignment& slot : slots) {
    if (slot.device.kind != DeviceKind::kCpu) return 0;
  }
  int cores = 0;
  for (const DeviceInfo& d : devices) cores += d.id.kind == DeviceKind::kCpu ? 1 : 0;
  const int threads = std::min(static_cast<int>(slots.size()), cores);
  return threads >= 2 ? threads : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicaSet>> BuildReplicaSet(std::shared_ptr<const Model> model,
                                                            const std::vector<DeviceInfo>& devices,
                                                            const ServingOptions& options,
                                                            SliceObserver* observer) {
  if (options.slot_memory_limit > 0 && !options.slots.empty()) {
    size_t bytes = 0;
    for (const auto& [v, weight] : model->graph().initializers) bytes += weight.byte_size();
    if (bytes > options.slot_memory_limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "slot ", options.slots.front().name, ": the model's weights take ", bytes,
          " bytes, over its ", options.slot_memory_limit,
          " bytes (--slot-memory-limit); place the model over several slots (placement)"));
    }
  }
  std::vector<std::unique_ptr<Replica>> replicas;
  for (const SlotAssignment& slot : options.slots) {
    const DeviceInfo* info = FindDevice(devices, slot.device);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", slot.name, ": no device ", DeviceIdToString(slot.device)));
    }
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*info, options.slot_options);
    if (!device.ok()) return device.status();
    const size_t plan_bytes = options.plan_memory_per_slot > 0
                                  ? options.plan_memory_per_slot
                                  : DefaultPlanMemoryPerSlot(*info, options.slots);
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(model, slot, *std::move(device), options.max_plans_per_slot, plan_bytes);
    if (!replica.ok()) return replica.status();
    replicas.push_back(*std::move(replica));
  }
  std::unique_ptr<Replica> wide;
  if (const int threads = WideThreads(options.slots, devices, options.slot_options); threads > 0) {
    const SlotAssignment& first = options.slots.front();
    SlotOptions wide_options = options.slot_options;
    wide_options.threads_per_slot = threads;
    absl::StatusOr<std::unique_ptr<Device>> device =
        CreateDevice(*FindDevice(devices, first.device), wide_options);
    if (!device.ok()) return device.status();
    const size_t plan_bytes = options.plan_memory_per_slot > 0
                                  ? options.plan_memory_per_slot
                                  : DefaultPlanMemoryPerSlot(device->get()->info(), options.slots);
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(model, SlotAssignment{"wide", first.device, first.weight},
                        *std::move(device), options.max_plans_per_slot, plan_bytes);
    if (!replica.ok()) return replica.status();
    wide = *std::move(replica);
  }
  std::unique_ptr<Device> merge_stream;
  if (options.merge_device.kind != DeviceKind::kCpu) {
    const DeviceInfo* info = FindDevice(devices, options.merge_device);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merge device ", DeviceIdToString(options.merge_device), ": no such device"));
    }
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*info, options.slot_options);
    if (!device.ok()) return device.status();
    merge_stream = *std::move(device);
  }
  ReplicaSet::Options set_options;
  set_options.merge_device = options.merge_device;
  set_options.observer = observer;
  set_options.transfer_chunks = options.transfer_chunks;
  set_options.shrink_on_oom = options.shrink_on_oom;
  return ReplicaSet::Create(std::move(model), std::move(replicas), set_options,
                            std::move(merge_stream), std::move(wide));
}

namespace {

// Rows the automatic placement measures a pass at.
constexpr int64_t kAutoPlacementRows = 8;

// `--placement auto`: the node order cut into one run per context of about
// equal cost, measured on a CPU slot (a GPU slot's kernels run
// asynchronously, so the plan's marks would not time them), where the fewest
// bytes cross; the cut is logged.
absl::StatusOr<std::vector<std::string>> AutoContexts(const std::shared_ptr<const Model>& model,
                                                      const std::vector<DeviceInfo>& devices,
                                                      const ServingOptions& options,
                                                      const std::vector<std::string>& contexts) {
  const DeviceInfo* cpu = nullptr;
  for (const DeviceInfo& d : devices) {
    if (cpu == nullptr && d.id.kind == DeviceKind::kCpu) cpu = &d;
  }
  if (cpu == nullptr) return absl::FailedPreconditionError("placement auto: no CPU to measure on");
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                            CreateDevice(*cpu, options.slot_options));
  REPLICAD_ASSIGN_OR_RETURN(NodeCosts costs,
                            MeasureNodeCosts(model, std::move(device), kAutoPlacementRows));
  const Graph& graph = model->graph();
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> context_of,
                            BalancedContexts(graph, costs, contexts, options.slot_memory_limit));
  std::string summary;
  for (size_t n = 0; n < context_of.size();) {
    size_t end = n;
    double seconds = 0;
    while (end < context_of.size() && context_of[end] == context_of[n])
      seconds += costs.seconds[end++];
    absl::StrAppend(&summary, summary.empty() ? "" : "; ", context_of[n], ": nodes ", n, " to ",
                    end - 1, " ('", graph.nodes[n].name, "' to '", graph.nodes[end - 1].name, "', ",
                    absl::StrFormat("%.2f", seconds * 1000), " ms at ", kAutoPlacementRows,
                    " rows)");
    n = end;
  }
  LogInfo(absl::StrCat("placement auto for model '", model->name(), "': ", summary));
  return context_of;
}

// A placement's pipelines: per copy of the device map's contexts
// ("dev0->cpu:0,cpu:1": two), its slots named by their context. Every
// context needs as many devices as the others (InvalidArgument naming it).
absl::StatusOr<std::vector<std::vector<SlotAssignment>>> PipelineCopies(
    const std::vector<SlotAssignment>& slots) {
  std::vector<std::vector<SlotAssignment>> copies;
  std::map<std::string, int> devices_of;
  for (const SlotAssignment& slot : slots) {
    if (copies.size() <= static_cast<size_t>(slot.copy)) copies.resize(slot.copy + 1);
    SlotAssignment context = slot;
    context.name = ContextName(slot);
    ++devices_of[context.name];
    copies[slot.copy].push_back(std::move(context));
  }
  for (const auto& [context, count] : devices_of) {
    if (count != static_cast<int>(copies.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device-map: context '", context, "' has ", count, " device(s), another ",
                       copies.size(),
                       "; a placed model runs one pipeline per device of each context, so "
                       "every context needs as many"));
    }
  }
  return copies;
}

// The context of each node of `model` under options.placement (rules, or
// "auto") over the contexts of one pipeline copy, errors naming
// options.placement_field.
absl::StatusOr<std::vector<std::string>> PlacedContexts(const std::shared_ptr<const Model>& model,
                                                        const std::vector<DeviceInfo>& devices,
                                                        const ServingOptions& options,
                                                        const std::vector<SlotAssignment>& copy) {
  std::vector<std::string> contexts;
  for (const SlotAssignment& slot : copy) contexts.push_back(slot.name);
  absl::StatusOr<std::vector<std::string>> context_of;
  if (options.placement == "auto") {
    context_of = AutoContexts(model, devices, options, contexts);
  } else {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<PlacementRule> rules,
                              ParsePlacement(options.placement, options.placement_field));
    context_of = NodeContexts(model->graph(), rules, contexts);
  }
  if (!context_of.ok()) {
    return absl::Status(context_of.status().code(),
                        absl::StrCat(options.placement_field, ": ", context_of.status().message()));
  }
  return context_of;
}

// Each part's slot, on its context's device.
PipelineReplica::DeviceMaker SlotDevices(const std::vector<DeviceInfo>& devices,
                                         const SlotOptions& slot_options) {
  return [devices,
          slot_options](const SlotAssignment& slot) -> absl::StatusOr<std::unique_ptr<Device>> {
    const DeviceInfo* info = FindDevice(devices, slot.device);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", slot.name, ": no device ", DeviceIdToString(slot.device)));
    }
    return CreateDevice(*info, slot_options);
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<Servable>> BuildServable(std::shared_ptr<const Model> model,
                                                        const std::vector<DeviceInfo>& devices,
                                                        const ServingOptions& options,
                                                        SliceObserver* observer,
                                                        PipelineObserver* pipelines) {
  if (options.placement.empty())
    return BuildReplicaSet(std::move(model), devices, options, observer);
  REPLICAD_ASSIGN_OR_RETURN(const std::vector<std::vector<SlotAssignment>> copies,
                            PipelineCopies(options.slots));
  REPLICAD_ASSIGN_OR_RETURN(const std::vector<std::string> context_of,
                            PlacedContexts(model, devices, options, copies[0]));
  absl::StatusOr<PlacedGraph> placed = PlaceNodes(model->graph(), context_of);
  if (!placed.ok()) {
    return absl::Status(placed.status().code(),
                        absl::StrCat(options.placement_field, ": ", placed.status().message()));
  }
  const size_t parts = placed->parts.size();
  std::vector<std::unique_ptr<PipelineReplica>> replicas;  // One pipeline per copy.
  PipelineReplicaOptions pipeline_options;
  pipeline_options.slot_memory_limit = options.slot_memory_limit;
  for (const std::vector<SlotAssignment>& contexts : copies) {
    REPLICAD_ASSIGN_OR_RETURN(
        std::unique_ptr<PipelineReplica> pipeline,
        PipelineReplica::Create(model, *placed, contexts,
                                SlotDevices(devices, options.slot_options), pipeline_options));
    replicas.push_back(std::move(pipeline));
  }
  const int micro_batches =
      options.micro_batches > 0 ? options.micro_batches : static_cast<int>(4 * parts);
  return std::make_unique<PipelineServable>(std::move(replicas), micro_batches, copies, pipelines);
}

ModelTrainerMaker PlacedModelTrainer(const std::vector<DeviceInfo>& devices,
                                     const ServingOptions& options) {
  if (options.placement.empty()) return nullptr;
  return [devices, options](
             std::shared_ptr<const Model> model,
             const TrainerOptions& trainer) -> absl::StatusOr<std::unique_ptr<ModelTrainer>> {
    REPLICAD_ASSIGN_OR_RETURN(const std::vector<std::vector<SlotAssignment>> copies,
                              PipelineCopies(options.slots));
    REPLICAD_ASSIGN_OR_RETURN(const std::vector<std::string> context_of,
                              PlacedContexts(model, devices, options, copies[0]));
    REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<PipelineTrainer> made,
                              PipelineTrainer::Create(std::move(model), context_of, copies,
                                                      SlotDevices(devices, options.slot_options),
                                                      trainer, options.micro_batches));
    return made;
  };
}

}  // namespace replicad
