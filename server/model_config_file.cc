#include "server/model_config_file.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/backends/backends.h"
#include "core/base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace replicad {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using inference::ModelInstanceGroup;

constexpr char kPlatform[] = "onnxruntime_onnx";
constexpr char kBackend[] = "onnxruntime";
constexpr char kModelFilename[] = "model.onnx";
// Instances (replicas, each with its own weights and stream) that the groups
// of one configuration may ask for in all. Far above any real machine's
// need; a count like 2^31 is a typo, and would otherwise be allocated slot by
// slot before anything could refuse it.
constexpr int64_t kMaxInstances = 1024;

// The fields replicad acts on or checks. A message whose own fields are
// listed is walked into; any other listed field is taken whole.
const std::vector<std::string>& HonouredFields() {
  static const auto* fields = new std::vector<std::string>{
      "name", "platform", "backend", "default_model_filename", "max_batch_size", "version_policy",
      "input.name", "input.data_type", "input.dims", "output.name", "output.data_type",
      "output.dims", "instance_group.name", "instance_group.kind", "instance_group.count",
      "instance_group.gpus",
      // The scheduler's (SchedulerOptionsOf).
      "dynamic_batching.preferred_batch_size", "dynamic_batching.max_queue_delay_microseconds",
      "dynamic_batching.preserve_ordering", "dynamic_batching.priority_levels",
      "dynamic_batching.default_priority_level", "dynamic_batching.default_queue_policy",
      "dynamic_batching.priority_queue_policy"};
  return *fields;
}

bool Listed(const std::string& key) {
  for (const auto* list : {&HonouredFields(), &HarmlessConfigFields()}) {
    if (std::find(list->begin(), list->end(), key) != list->end()) return true;
  }
  return false;
}

bool HasListedFields(const std::string& key) {
  for (const auto* list : {&HonouredFields(), &HarmlessConfigFields()}) {
    for (const std::string& field : *list) {
      if (absl::StartsWith(field, key + ".")) return true;
    }
  }
  return false;
}

// The first field set in `message` (at `key`, e.g. "input", and `path`, e.g.
// "input[0]") that is neither honoured nor harmless; empty when there is none.
std::string FirstRefusedField(const Message& message, const std::string& key,
                              const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string field_key =
        key.empty() ? field->name() : absl::StrCat(key, ".", field->name());
    const std::string field_path =
        path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    const bool nested = HasListedFields(field_key);
    if (Listed(field_key) && !nested) continue;
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (is_message && field->is_repeated() && nested) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        std::string refused = FirstRefusedField(reflection->GetRepeatedMessage(message, field, i),
                                                field_key, absl::StrCat(field_path, "[", i, "]"));
        if (!refused.empty()) return refused;
      }
      continue;
    }
    // A singular message that sets nothing says nothing (proto3's defaults),
    // unless choosing it is the setting: a oneof member like sequence_batching {}.
    if (is_message && !field->is_repeated() && (nested || field->containing_oneof() == nullptr)) {
      std::string refused =
          FirstRefusedField(reflection->GetMessage(message, field), field_key, field_path);
      if (!refused.empty()) return refused;
      continue;
    }
    return field_path;
  }
  return "";
}

// Line and column (from 1) and text of the first parse error.
class FirstParseError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

absl::Status CheckString(const std::string& field, const std::string& received,
                         const std::string& expected, const std::string& why) {
  if (received.empty() || received == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected '", expected, "' (", why, "), received '", received, "'"));
}

template <typename Tensors>
absl::Status CheckTensorNames(const char* field, const Tensors& tensors) {
  std::set<std::string> names;
  for (int i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors.Get(i).name();
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "].name: expected the model's tensor name, received ''"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "].name: '", name, "' is listed twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInstanceGroups(const inference::ModelConfig& config) {
  int64_t instances = 0;
  for (int i = 0; i < config.instance_group_size(); ++i) {
    const ModelInstanceGroup& group = config.instance_group(i);
    const std::string field = absl::StrCat("instance_group[", i, "]");
    if (group.count() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".count: expected at least 1 (0 or unset means 1), received ", group.count()));
    }
    // A group with gpus has `count` instances on each of them.
    instances += std::max<int64_t>(group.count(), 1) * std::max(group.gpus_size(), 1);
    if (instances > kMaxInstances) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".count: expected at most ", kMaxInstances, " instances in all groups, received ",
          group.count(),
          group.gpus_size() > 1 ? absl::StrCat(" on each of ", group.gpus_size(), " gpus") : "",
          ", which makes ", instances));
    }
    if (group.kind() == ModelInstanceGroup::KIND_MODEL) {
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ".kind: expected KIND_CPU, KIND_GPU or KIND_AUTO, received KIND_MODEL "
                       "(replicad places every replica itself)"));
    }
    if (group.kind() == ModelInstanceGroup::KIND_CPU && group.gpus_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".gpus: expected none with kind KIND_CPU, received ", group.gpus_size()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckVersionPolicy(const inference::ModelVersionPolicy& policy) {
  if (policy.has_latest() && policy.latest().num_versions() == 0) {
    return absl::InvalidArgumentError(
        "version_policy.latest.num_versions: expected at least 1, received 0");
  }
  if (policy.has_specific()) {
    if (policy.specific().versions_size() == 0) {
      return absl::InvalidArgumentError(
          "version_policy.specific.versions: expected at least one version, received none");
    }
    for (int64_t version : policy.specific().versions()) {
      if (version <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "version_policy.specific.versions: expected positive versions, received ", version));
      }
    }
  }
  return absl::OkStatus();
}

// `microseconds` of `field` as a duration; an error past what one can hold.
absl::StatusOr<absl::Duration> Microseconds(const std::string& field, uint64_t microseconds) {
  constexpr uint64_t kMost = std::numeric_limits<int64_t>::max();
  if (microseconds > kMost) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected at most ", kMost, ", received ", microseconds));
  }
  return absl::Microseconds(static_cast<int64_t>(microseconds));
}

// A level (priority_levels, default_priority_level, a priority_queue_policy
// key) as SchedulerOptions holds it.
absl::StatusOr<uint32_t> Level(const std::string& field, uint64_t level) {
  constexpr uint64_t kMost = std::numeric_limits<uint32_t>::max();
  if (level > kMost) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected at most ", kMost, ", received ", level));
  }
  return static_cast<uint32_t>(level);
}

absl::StatusOr<QueuePolicy> PolicyOf(const std::string& field,
                                     const inference::ModelQueuePolicy& config) {
  QueuePolicy policy;
  policy.timeout_action = config.timeout_action() == inference::ModelQueuePolicy::DELAY
                              ? QueuePolicy::TimeoutAction::kDelay
                              : QueuePolicy::TimeoutAction::kReject;
  REPLICAD_ASSIGN_OR_RETURN(absl::Duration timeout,
                            Microseconds(absl::StrCat(field, ".default_timeout_microseconds"),
                                         config.default_timeout_microseconds()));
  policy.default_timeout = timeout;
  policy.allow_timeout_override = config.allow_timeout_override();
  policy.max_queue_size = config.max_queue_size();
  return policy;
}

absl::Status CheckConfig(const inference::ModelConfig& config, const std::string& name) {
  const std::string refused = FirstRefusedField(config, "", "");
  if (!refused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field '", refused,
        "' is not supported by replicad; remove it (docs/model-repositories.md lists the fields "
        "replicad honours and those it ignores as harmless)"));
  }
  for (absl::Status s :
       {CheckString("name", config.name(), name, "the model's directory name"),
        CheckString("platform", config.platform(), kPlatform, "replicad serves ONNX models"),
        CheckString("backend", config.backend(), kBackend, "replicad serves ONNX models"),
        CheckString("default_model_filename", config.default_model_filename(), kModelFilename,
                    "replicad loads VERSION/model.onnx")}) {
    if (!s.ok()) return s;
  }
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size: expected 0 (no batch dimension) or more, received ",
                     config.max_batch_size()));
  }
  REPLICAD_RETURN_IF_ERROR(CheckTensorNames("input", config.input()));
  REPLICAD_RETURN_IF_ERROR(CheckTensorNames("output", config.output()));
  REPLICAD_RETURN_IF_ERROR(CheckInstanceGroups(config));
  REPLICAD_RETURN_IF_ERROR(SchedulerOptionsOf(config, SchedulerOptions()).status());
  return CheckVersionPolicy(config.version_policy());
}

std::string DimsToString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// `spec`'s shape with the sizes `dims` fixes where the model leaves them open;
// an error naming `field` when `data_type` or `dims` disagree with `spec`.
absl::StatusOr<Shape> CheckTensor(const TensorSpec& spec, inference::DataType data_type,
                                  const google::protobuf::RepeatedField<int64_t>& dims,
                                  bool batched, const std::string& field) {
  const inference::DataType model_type = ConfigDataType(spec.type.dtype);
  if (data_type != inference::TYPE_INVALID && data_type != model_type) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " data_type: expected ", inference::DataType_Name(model_type),
                     " (the model's), received ", inference::DataType_Name(data_type)));
  }
  const std::vector<int64_t> expected = ConfigDims(spec, batched);
  const std::vector<int64_t> received(dims.begin(), dims.end());
  bool match = expected.size() == received.size();
  for (size_t j = 0; match && j < received.size(); ++j) {
    match = received[j] == -1 || received[j] > 0;
    match = match && (received[j] == -1 || expected[j] == -1 || received[j] == expected[j]);
  }
  if (!match) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " dims: expected ", DimsToString(expected), " (the model's shape ",
                     ShapeToString(spec.type.shape),
                     batched ? " without the batch dimension, as max_batch_size > 0 means"
                             : ", batch dimension included, as max_batch_size 0 means",
                     "; -1 matches any size), received ", DimsToString(received)));
  }
  Shape shape = spec.type.shape;
  const size_t offset = shape.size() - expected.size();
  for (size_t j = 0; j < received.size(); ++j) {
    if (shape[offset + j] == kAnyDim) shape[offset + j] = received[j];
  }
  return shape;
}

std::string TensorNames(const std::vector<TensorSpec>& specs) {
  return absl::StrJoin(specs, ", ",
                       [](std::string* out, const TensorSpec& s) { absl::StrAppend(out, s.name); });
}

// Checks every entry of `tensors` (the configuration's inputs, or outputs
// when not `inputs`) against `model` and gives, per model tensor, the shape
// the configuration holds it to.
template <typename Tensors>
absl::StatusOr<std::vector<Shape>> CheckTensors(const Tensors& tensors, const Model& model,
                                                bool inputs, bool batched) {
  const char* field = inputs ? "input" : "output";
  const std::vector<TensorSpec>& specs = inputs ? model.inputs() : model.outputs();
  std::vector<Shape> shapes;
  for (const TensorSpec& s : specs) shapes.push_back(s.type.shape);
  for (int i = 0; i < tensors.size(); ++i) {
    const auto& tensor = tensors.Get(i);
    const std::string label = absl::StrCat(field, "[", i, "] '", tensor.name(), "'");
    const int index = inputs ? model.InputIndex(tensor.name()) : model.OutputIndex(tensor.name());
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": the model has no such ", field,
                                                     "; its ", field, "s: ", TensorNames(specs)));
    }
    REPLICAD_ASSIGN_OR_RETURN(
        Shape shape, CheckTensor(specs[index], tensor.data_type(), tensor.dims(), batched, label));
    shapes[index] = std::move(shape);
  }
  return shapes;
}

}  // namespace

const std::vector<std::string>& HarmlessConfigFields() {
  static const auto* fields = new std::vector<std::string>{
      "parameters",                   // ONNX Runtime's session settings (threads, memory arenas).
      "model_warmup",                 // Warm-up requests at load: only the first request's latency.
      "metric_tags",                  // Extra labels on Triton's metrics.
      "model_metrics",                // Triton's metric histogram settings.
      "response_cache",               // Triton's cache of identical requests: answers are the same.
      "input.format",                 // An image-layout hint for clients; the dims are what count.
      "output.label_filename",        // For classification, which requests are refused for.
      "instance_group.rate_limiter",  // Only with tritonserver --rate-limit, off by default.
      // Speed settings of ONNX Runtime and Triton's CUDA handling.
      "optimization.graph", "optimization.priority", "optimization.cuda",
      "optimization.input_pinned_memory", "optimization.output_pinned_memory",
      "optimization.gather_kernel_buffer_threshold"};
  return *fields;
}

inference::DataType ConfigDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return inference::TYPE_FP32;
    case DType::kUint8:
      return inference::TYPE_UINT8;
    case DType::kInt8:
      return inference::TYPE_INT8;
    case DType::kInt32:
      return inference::TYPE_INT32;
    case DType::kInt64:
      return inference::TYPE_INT64;
    case DType::kBool:
      return inference::TYPE_BOOL;
    case DType::kFloat16:
      return inference::TYPE_FP16;
    case DType::kBFloat16:
      return inference::TYPE_BF16;
  }
  return inference::TYPE_INVALID;
}

std::vector<int64_t> ConfigDims(const TensorSpec& spec, bool batched) {
  std::vector<int64_t> dims;
  for (size_t i = batched && !spec.type.shape.empty() ? 1 : 0; i < spec.type.shape.size(); ++i) {
    dims.push_back(spec.type.shape[i] < 0 ? -1 : spec.type.shape[i]);
  }
  return dims;
}

absl::StatusOr<inference::ModelConfig> ReadModelConfig(const std::string& path,
                                                       const std::string& name) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::ostringstream text;
  text << file.rdbuf();
  inference::ModelConfig config;
  google::protobuf::TextFormat::Parser parser;
  FirstParseError error;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(text.str(), &config)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", error.error()));
  }
  if (absl::Status s = CheckConfig(config, name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  config.set_name(name);
  config.set_platform(kPlatform);
  config.set_backend(kBackend);
  return config;
}

absl::StatusOr<std::vector<int64_t>> SelectVersions(const inference::ModelVersionPolicy& policy,
                                                    std::vector<int64_t> available) {
  std::sort(available.begin(), available.end());
  available.erase(std::unique(available.begin(), available.end()), available.end());
  if (policy.has_all()) return available;
  if (policy.has_specific()) {
    std::set<int64_t> chosen;
    for (int64_t version : policy.specific().versions()) {
      if (!std::binary_search(available.begin(), available.end(), version)) {
        return absl::InvalidArgumentError(
            absl::StrCat("version_policy.specific.versions: version ", version,
                         " is not in the repository; it has ", absl::StrJoin(available, ", ")));
      }
      chosen.insert(version);
    }
    return std::vector<int64_t>(chosen.begin(), chosen.end());
  }
  const size_t latest = policy.has_latest() ? policy.latest().num_versions() : 1;
  if (available.size() > latest) available.erase(available.begin(), available.end() - latest);
  return available;
}

absl::StatusOr<std::vector<SlotAssignment>> InstanceGroupSlots(
    const std::vector<DeviceInfo>& devices, int threads_per_slot, inference::ModelConfig* config) {
  std::vector<int> gpus;
  std::vector<DeviceInfo> cpus;
  for (const DeviceInfo& d : devices) {
    if (d.id.kind == DeviceKind::kCuda) gpus.push_back(d.id.ordinal);
    if (d.id.kind == DeviceKind::kCpu) cpus.push_back(d);
  }
  // CPU instances tile the cores as "--devices all" would, across groups.
  const std::vector<DeviceId> cpu_slots = DefaultSlots(cpus, threads_per_slot);
  size_t next_cpu = 0;
  std::vector<SlotAssignment> slots;
  auto add = [&slots](const DeviceId& device) {
    slots.push_back({absl::StrCat("r", slots.size()), device, 1.0});
  };
  for (int i = 0; i < config->instance_group_size(); ++i) {
    ModelInstanceGroup* group = config->mutable_instance_group(i);
    const std::string field = absl::StrCat("instance_group[", i, "]");
    ModelInstanceGroup::Kind kind = group->kind();
    if (kind == ModelInstanceGroup::KIND_AUTO) {
      kind = group->gpus_size() > 0 || !gpus.empty() ? ModelInstanceGroup::KIND_GPU
                                                     : ModelInstanceGroup::KIND_CPU;
    }
    const int count = std::max(group->count(), 1);
    if (kind == ModelInstanceGroup::KIND_GPU) {
      if (gpus.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".kind: KIND_GPU, but this machine has no GPU (devices: ",
                         absl::StrJoin(devices, ", ",
                                       [](std::string* out, const DeviceInfo& d) {
                                         absl::StrAppend(out, DeviceIdToString(d.id));
                                       }),
                         "); use KIND_CPU"));
      }
      if (group->gpus_size() == 0) group->mutable_gpus()->Add(gpus.begin(), gpus.end());
      for (int gpu : group->gpus()) {
        absl::StatusOr<DeviceId> device = ParseAvailableDevice(absl::StrCat("cuda:", gpu), devices);
        if (!device.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ".gpus: ", device.status().message()));
        }
        for (int c = 0; c < count; ++c) add(*device);
      }
    } else {
      for (int c = 0; c < count; ++c) add(cpu_slots[next_cpu++ % cpu_slots.size()]);
    }
    group->set_kind(kind);
    group->set_count(count);
    if (group->name().empty()) group->set_name(absl::StrCat(config->name(), "_", i));
  }
  return slots;
}

absl::StatusOr<SchedulerOptions> SchedulerOptionsOf(const inference::ModelConfig& config,
                                                    const SchedulerOptions& daemon_defaults) {
  SchedulerOptions options;
  options.max_queue_bytes = daemon_defaults.max_queue_bytes;
  options.measured_weights = daemon_defaults.measured_weights;
  options.warmup_max_rows = daemon_defaults.warmup_max_rows;
  // model_warmup's sizes are warmed (with zeros: the inputs it names change
  // no plan or timing).
  for (const inference::ModelWarmup& warmup : config.model_warmup()) {
    options.warmup_batch_sizes.push_back(warmup.batch_size());
  }
  options.max_batch_size = config.max_batch_size();
  // replicad's own parameter (Triton passes `parameters` to its backend):
  // the sequence lengths requests are padded to (sequence_buckets.h).
  if (auto it = config.parameters().find("sequence_buckets"); it != config.parameters().end()) {
    for (absl::string_view length : absl::StrSplit(it->second.string_value(), ',')) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(length, &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameters.sequence_buckets: expected lengths separated by commas, e.g. "
                         "\"32,64,128\", received \"",
                         it->second.string_value(), "\""));
      }
      options.sequence_buckets.push_back(value);
    }
  }
  // Triton's default scheduler: each request alone, one queue, the proto's policy.
  options.dynamic_batching = false;
  options.default_queue_policy = QueuePolicy();
  options.default_queue_policy.allow_timeout_override = false;
  if (!config.has_dynamic_batching()) {
    REPLICAD_RETURN_IF_ERROR(options.Validate());
    return options;
  }

  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  // max_batch_size 0: the model has no batch dimension Triton could batch
  // along, so requests are queued and ordered as configured but never fused.
  options.dynamic_batching = config.max_batch_size() > 0;
  if (config.max_batch_size() == 0 && batching.preferred_batch_size_size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching.preferred_batch_size: expected none, as max_batch_size 0 "
                     "means the model does not batch; received ",
                     absl::StrJoin(batching.preferred_batch_size(), ",")));
  }
  options.preferred_batch_sizes.assign(batching.preferred_batch_size().begin(),
                                       batching.preferred_batch_size().end());
  REPLICAD_ASSIGN_OR_RETURN(absl::Duration delay,
                            Microseconds("dynamic_batching.max_queue_delay_microseconds",
                                         batching.max_queue_delay_microseconds()));
  options.max_queue_delay = delay;
  options.preserve_ordering = batching.preserve_ordering();
  absl::StatusOr<uint32_t> levels =
      Level("dynamic_batching.priority_levels", batching.priority_levels());
  if (!levels.ok()) return levels.status();
  options.priority_levels = *levels;
  absl::StatusOr<uint32_t> default_level =
      Level("dynamic_batching.default_priority_level", batching.default_priority_level());
  if (!default_level.ok()) return default_level.status();
  options.default_priority_level = *default_level;
  absl::StatusOr<QueuePolicy> default_policy =
      PolicyOf("dynamic_batching.default_queue_policy", batching.default_queue_policy());
  if (!default_policy.ok()) return default_policy.status();
  options.default_queue_policy = *default_policy;
  for (const auto& [key, config_policy] : batching.priority_queue_policy()) {
    const std::string field = absl::StrCat("dynamic_batching.priority_queue_policy[", key, "]");
    absl::StatusOr<uint32_t> level = Level(field, key);
    if (!level.ok()) return level.status();
    absl::StatusOr<QueuePolicy> policy = PolicyOf(field, config_policy);
    if (!policy.ok()) return policy.status();
    options.priority_queue_policy[*level] = *policy;
  }
  REPLICAD_RETURN_IF_ERROR(options.Validate());
  // Triton keeps them as a set; errors above name them as the file lists them.
  std::vector<int64_t>& sizes = options.preferred_batch_sizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return options;
}

absl::StatusOr<std::shared_ptr<const Model>> ApplyTensorConfig(
    std::shared_ptr<const Model> model, const inference::ModelConfig& config) {
  const bool batched = config.max_batch_size() > 0;
  if (batched) {
    for (const TensorSpec& s : model->inputs()) {
      if (s.type.shape.empty() || s.type.shape[0] != kAnyDim) {
        return absl::InvalidArgumentError(
            absl::StrCat("max_batch_size: expected 0, as the model does not batch: input '", s.name,
                         "' has shape ", ShapeToString(s.type.shape),
                         " with no open first dimension; received ", config.max_batch_size()));
      }
    }
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Shape> inputs,
                            CheckTensors(config.input(), *model, true, batched));
  absl::StatusOr<std::vector<Shape>> outputs =
      CheckTensors(config.output(), *model, false, batched);
  if (!outputs.ok()) return outputs.status();
  bool narrowed = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    narrowed = narrowed || (inputs)[i] != model->inputs()[i].type.shape;
  }
  if (!narrowed) return model;
  // Plans take their shapes from each slice, so only the signature that
  // requests are checked against changes; the weights are shared, not copied.
  Graph graph = model->graph();
  for (size_t i = 0; i < inputs.size(); ++i) {
    graph.values[graph.inputs[i]].type.shape = (inputs)[i];
  }
  return std::make_shared<const Model>(model->name(), model->source(), std::move(graph));
}

}  // namespace replicad
