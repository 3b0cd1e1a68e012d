#ifndef REPLICAD_SERVER_MODEL_CONFIG_FILE_H_
#define REPLICAD_SERVER_MODEL_CONFIG_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device_map.h"
#include "core/model/model.h"
#include "core/serve/scheduler_options.h"
#include "inference/model_config.pb.h"

namespace replicad {

// A model's Triton configuration, DIR/NAME/config.pbtxt (inference.ModelConfig
// in protobuf text format): reading it and checking it against what replicad
// honours, the model's ONNX file and this machine's devices. A field that
// replicad neither honours nor may ignore without changing an answer is
// refused by name, so a repository never serves something other than what
// its configuration says. Every error is InvalidArgument unless noted; the
// functions keep no state (thread-safe).

// The fields (paths such as "input.format") that are set in configurations
// Triton users write but change no answer, so they are accepted and ignored.
// docs/model-repositories.md lists them.
const std::vector<std::string>& HarmlessConfigFields();

// A model tensor as a configuration describes it: its data type (TYPE_FP32,
// TYPE_INT64), and its dims (-1 where open) without the batch dimension when
// the model batches (max_batch_size > 0).
inference::DataType ConfigDataType(DType dtype);
std::vector<int64_t> ConfigDims(const TensorSpec& spec, bool batched);

// Reads `path` as model `name`'s configuration, checks what needs neither the
// model nor the devices, and fills in name, platform and backend. NotFound
// when the file cannot be read; every other error names `path` and:
//  - a parse error, with its line and column;
//  - a set field neither honoured nor harmless, e.g. "input[0].reshape";
//  - name other than `name`, platform other than "onnxruntime_onnx", backend
//    other than "onnxruntime", default_model_filename other than "model.onnx";
//  - max_batch_size < 0; an input or output named twice;
//  - dynamic_batching that SchedulerOptionsOf refuses;
//  - instance_group: count < 0, more than 1024 instances in all groups
//    (count times the gpus listed), kind KIND_MODEL, gpus with KIND_CPU;
//  - version_policy: latest with num_versions 0, specific with no versions
//    or one that is not positive.
absl::StatusOr<inference::ModelConfig> ReadModelConfig(const std::string& path,
                                                       const std::string& name);

// The versions `policy` serves out of `available`, ascending: latest{N} the N
// highest, all{} every one, specific{} those listed (InvalidArgument naming a
// listed version the repository lacks, and those it has). Unset: latest{1}.
absl::StatusOr<std::vector<int64_t>> SelectVersions(const inference::ModelVersionPolicy& policy,
                                                    std::vector<int64_t> available);

// The replica slots `config`'s instance groups ask for, named r0, r1, ... in
// order; empty when it has none (the daemon's slots apply). KIND_GPU: `count`
// slots on each GPU of `gpus` (every GPU when empty); KIND_CPU: `count` slots
// tiling the cores `threads_per_slot` at a time, as "--devices all" does;
// KIND_AUTO: KIND_GPU when `gpus` is set or the machine has a GPU, else
// KIND_CPU. Count 0 (unset) means 1, as in Triton. Each group is rewritten to
// what it resolved to (kind, count, gpus, name "NAME_i" when unnamed), so the
// configuration reports what runs. InvalidArgument for KIND_GPU on a machine
// without GPUs, or naming a GPU that `devices` lacks (listing those it has).
absl::StatusOr<std::vector<SlotAssignment>> InstanceGroupSlots(
    const std::vector<DeviceInfo>& devices, int threads_per_slot, inference::ModelConfig* config);

// How `config`'s model is scheduled, as Triton would: without
// dynamic_batching, each request alone in one queue under the proto's default
// policy (REJECT, no timeout, allow_timeout_override false, no
// max_queue_size); with it, its fields, requests being fused only when
// max_batch_size > 0 (0: the model has no batch dimension). max_batch_size is
// config.max_batch_size, 0 included; the caller puts the model's effective
// limit there. `daemon_defaults` gives only what a configuration cannot say:
// max_queue_bytes and measured_weights. Errors name the field (e.g.
// "dynamic_batching.default_priority_level") and the values, not the file:
// what SchedulerOptions::Validate refuses, preferred_batch_size with
// max_batch_size 0, a level above 2^32-1 or a time above 2^63-1 us.
absl::StatusOr<SchedulerOptions> SchedulerOptionsOf(const inference::ModelConfig& config,
                                                    const SchedulerOptions& daemon_defaults);

// Checks `config`'s inputs and outputs against `model` and gives the model to
// serve: `model` itself, or a copy whose input signature fixes the dims the
// configuration fixes where the model leaves them open (so requests are held
// to them). Dims leave out the batch dimension when max_batch_size > 0, as
// Triton means; -1 on either side matches any size. Errors name the tensor,
// the field, the expected and the received value: a name the model lacks; a
// data_type other than the model's (TYPE_FP32 or TYPE_INT64); dims of another
// rank or size; max_batch_size > 0 for a model with an input whose first
// dimension is fixed (it does not batch).
absl::StatusOr<std::shared_ptr<const Model>> ApplyTensorConfig(
    std::shared_ptr<const Model> model, const inference::ModelConfig& config);

}  // namespace replicad

#endif  // REPLICAD_SERVER_MODEL_CONFIG_FILE_H_
