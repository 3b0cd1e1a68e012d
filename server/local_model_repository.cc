#include "server/local_model_repository.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/model/default_model.h"
#include "core/model/onnx_import.h"
#include "core/model/weight_file.h"
#include "google/protobuf/text_format.h"
#include "server/model_config_file.h"

namespace replicad {
namespace {

// Smaller initializers (biases, normalization scales) stay in anonymous
// memory: kernels read them on every run, and they are a small part of a model.
constexpr size_t kMinFileWeightBytes = size_t{64} << 10;

absl::StatusOr<std::shared_ptr<const Model>> LoadSource(const ModelSource& source,
                                                        ComputePrecision precision) {
  if (source.path.empty()) return LoadDefaultModel(precision);
  OnnxImportOptions options;
  options.precision = precision;
  return LoadOnnxFile(source.path, source.name, options);
}

// `status` with the model's config.pbtxt named, when it comes from there.
absl::Status InFile(const ModelSource& source, const absl::Status& status) {
  if (source.config_path.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(source.config_path, ": ", status.message()));
}

// How every version of a model is served: the daemon's options, or what its
// config.pbtxt says (checked and resolved, kept to be reported).
struct ModelSettings {
  inference::ModelConfig config;  // Empty without a config.pbtxt: latest{1} is served.
  std::string config_text;        // `config` printed; empty without a config.pbtxt.
  ServingOptions options;
};

absl::StatusOr<ModelSettings> SettingsOf(const ModelSource& source,
                                         const std::vector<DeviceInfo>& devices,
                                         const ServingOptions& daemon) {
  ModelSettings settings;
  settings.options = daemon;
  if (source.config_path.empty()) return settings;
  REPLICAD_ASSIGN_OR_RETURN(inference::ModelConfig config,
                            ReadModelConfig(source.config_path, source.name));
  settings.config = std::move(config);
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      InstanceGroupSlots(devices, daemon.slot_options.threads_per_slot, &settings.config);
  if (!slots.ok()) return InFile(source, slots.status());
  if (!slots->empty()) settings.options.slots = *std::move(slots);
  // With max_batch_size 0 (Triton: no batch dimension) --max-batch-size still bounds dim 0.
  if (settings.config.max_batch_size() > 0) {
    settings.options.max_batch_size = settings.config.max_batch_size();
  }
  absl::StatusOr<SchedulerOptions> scheduling =
      SchedulerOptionsOf(settings.config, daemon.scheduling);
  if (!scheduling.ok()) return InFile(source, scheduling.status());
  settings.options.scheduling = *std::move(scheduling);
  // replicad's own parameter, as sequence_buckets: the model's precision.
  if (auto it = settings.config.parameters().find("precision");
      it != settings.config.parameters().end()) {
    absl::StatusOr<ComputePrecision> precision =
        ParseComputePrecision(it->second.string_value(), "parameters.precision");
    if (!precision.ok()) return InFile(source, precision.status());
    settings.options.precision = *precision;
  }
  // And model parallelism: the placement over the slots, and its micro-batches.
  if (auto it = settings.config.parameters().find("placement");
      it != settings.config.parameters().end()) {
    settings.options.placement = it->second.string_value();
    settings.options.placement_field = "parameters.placement";
  }
  if (auto it = settings.config.parameters().find("micro_batches");
      it != settings.config.parameters().end()) {
    int micro_batches = 0;
    if (!absl::SimpleAtoi(it->second.string_value(), &micro_batches) || micro_batches < 1) {
      return InFile(source, absl::InvalidArgumentError(absl::StrCat(
                                "parameters.micro_batches: expected an integer >= 1, received '",
                                it->second.string_value(), "'")));
    }
    settings.options.micro_batches = micro_batches;
  }
  google::protobuf::TextFormat::PrintToString(settings.config, &settings.config_text);
  return settings;
}

absl::StatusOr<std::shared_ptr<LoadedModel>> LoadVersion(
    const ModelSource& source, const ModelSettings& settings,
    const LocalModelRepository::Config& config) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadSource(source, settings.options.precision);
  if (!model.ok()) return model.status();
  if (!settings.config_text.empty()) {
    model = ApplyTensorConfig(*std::move(model), settings.config);
    if (!model.ok()) return InFile(source, model.status());
  }
  if (const std::string& dir = settings.options.weight_file_dir; !dir.empty()) {
    absl::StatusOr<std::shared_ptr<const Model>> in_file =
        WithWeightsInFile(*model, dir, kMinFileWeightBytes);
    if (in_file.ok()) {
      model = *std::move(in_file);
    } else {  // The model serves as well with its weights in anonymous memory.
      LogWarning(
          absl::StrCat(in_file.status().message(), "; its weights stay in anonymous memory"));
    }
  }
  absl::StatusOr<std::unique_ptr<Servable>> set =
      BuildServable(*model, config.devices, settings.options, config.metrics,
                    config.metrics != nullptr ? config.metrics->pipelines() : nullptr);
  if (!set.ok()) return set.status();
  if (const auto* replicas = dynamic_cast<const ReplicaSet*>(set->get());
      replicas != nullptr && config.metrics != nullptr) {
    for (const auto& replica : replicas->replicas()) config.metrics->AddReplica(*replica);
  }
  auto loaded = std::make_shared<LoadedModel>();
  loaded->name = source.name;
  loaded->version = source.version;
  loaded->source = (*model)->source();
  loaded->max_batch_size = settings.options.max_batch_size;
  loaded->scheduling = settings.options.scheduling;
  // The limit requests are held to, which the scheduler's batches keep to
  // too; without one, fused batches still stop somewhere.
  loaded->scheduling.max_batch_size = settings.options.max_batch_size > 0
                                          ? settings.options.max_batch_size
                                          : kDefaultFusedBatchRows;
  loaded->config_text = settings.config_text;
  loaded->servable = *std::move(set);
  loaded->training = std::make_shared<TrainingSession>(TrainingSession::Environment{
      source.name, source.path, config.devices, settings.options.slots,
      settings.options.slot_options, config.checkpoints, config.keep_checkpoints, config.job,
      config.rank_shards, PlacedModelTrainer(config.devices, settings.options)});
  // Predict after a step runs on a set like this one around the step's weights.
  loaded->published = std::make_shared<PublishedServable>(
      loaded->servable, loaded->training,
      [devices = config.devices, options = settings.options, observer = config.metrics](
          std::shared_ptr<const Model> trained) -> absl::StatusOr<std::shared_ptr<Servable>> {
        return BuildServable(std::move(trained), devices, options, observer,
                             observer != nullptr ? observer->pipelines() : nullptr);
      },
      config.retirer);
  if (absl::Status started = StartScheduling(*loaded, config.metrics, /*warm=*/true);
      !started.ok()) {
    return InFile(source, started);
  }
  if (config.metrics != nullptr) config.metrics->AddModel(*loaded);
  return loaded;
}

}  // namespace

LocalModelRepository::LocalModelRepository(Config config) : config_(std::move(config)) {}

absl::StatusOr<std::vector<ModelSource>> LocalModelRepository::Sources() const {
  std::vector<ModelSource> sources;
  if (!config_.directory.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<ModelSource> found,
                              ScanModelRepository(config_.directory));
    sources = std::move(found);
  }
  std::vector<ModelSource> fixed_and_uploaded = config_.fixed;
  if (!config_.upload_directory.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<ModelSource> uploaded,
                              ScanModelRepository(config_.upload_directory, "--model-upload-root"));
    fixed_and_uploaded.insert(fixed_and_uploaded.end(), uploaded.begin(), uploaded.end());
  }
  for (const ModelSource& fixed : fixed_and_uploaded) {
    for (const ModelSource& s : sources) {
      if (s.name == fixed.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("two models are named '", fixed.name, "': ", s.path, " and ", fixed.path));
      }
    }
    sources.push_back(fixed);
  }
  std::sort(sources.begin(), sources.end(), [](const ModelSource& a, const ModelSource& b) {
    return a.name != b.name ? a.name < b.name : a.version < b.version;
  });
  if (config_.directory.empty() && config_.upload_directory.empty() && sources.empty()) {
    sources.push_back(ModelSource{"default", "", 1, ""});
  }
  return sources;
}

absl::StatusOr<std::vector<ModelRepository::Entry>> LocalModelRepository::List() const {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<ModelSource> sources, Sources());
  std::map<std::string, std::vector<ModelSource>> by_name;
  for (const ModelSource& s : sources) by_name[s.name].push_back(s);
  std::vector<Entry> entries;
  for (const auto& [name, versions] : by_name) entries.push_back({name, FingerprintOf(versions)});
  return entries;
}

absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> LocalModelRepository::Load(
    const std::string& name) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<ModelSource> sources, Sources());
  std::map<int64_t, ModelSource> versions;
  for (const ModelSource& s : sources) {
    if (s.name == name) versions[s.version] = s;
  }
  if (versions.empty()) {
    return absl::NotFoundError(absl::StrCat("the model repository has no model '", name, "'"));
  }
  auto fail = [&name](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat("model '", name, "': ", status.message()));
  };
  absl::StatusOr<ModelSettings> settings =
      SettingsOf(versions.begin()->second, config_.devices, config_.options);
  if (!settings.ok()) return fail(settings.status());
  std::vector<int64_t> available;
  for (const auto& [version, source] : versions) available.push_back(version);
  absl::StatusOr<std::vector<int64_t>> served =
      SelectVersions(settings->config.version_policy(), available);
  if (!served.ok()) return fail(InFile(versions.begin()->second, served.status()));
  std::vector<std::shared_ptr<LoadedModel>> loaded;
  for (int64_t version : *served) {
    absl::StatusOr<std::shared_ptr<LoadedModel>> one =
        LoadVersion(versions[version], *settings, config_);
    if (!one.ok()) return fail(one.status());
    loaded.push_back(*std::move(one));
  }
  return loaded;
}

}  // namespace replicad
