#include "server/served_models.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/default_model.h"
#include "core/model/onnx_import.h"

namespace replicad {
namespace {

absl::StatusOr<std::shared_ptr<const Model>> LoadSource(const ModelSource& source) {
  if (source.path.empty()) return LoadDefaultModel();
  return LoadOnnxFile(source.path, source.name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServedModels>> ServedModels::Load(
    const std::vector<ModelSource>& sources, const std::vector<DeviceInfo>& devices,
    const ServingOptions& options, SliceObserver* observer) {
  auto served = std::make_unique<ServedModels>();
  for (const ModelSource& source : sources) {
    if (served->models_.count(source.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("two models are named '", source.name, "'"));
    }
    absl::StatusOr<std::shared_ptr<const Model>> model = LoadSource(source);
    if (!model.ok()) {
      return absl::Status(model.status().code(), absl::StrCat("model '", source.name,
                                                              "': ", model.status().message()));
    }
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
        BuildReplicaSet(*model, devices, options, observer);
    if (!set.ok()) return set.status();
    ServedModel& entry = served->models_[source.name];
    entry.model = *std::move(model);
    entry.replicas = *std::move(set);
    entry.max_batch_size = options.max_batch_size;
    entry.training = std::make_unique<ModelTraining>(
        ModelTraining::Environment{source, devices, options, observer});
  }
  return served;
}

const ServedModel* ServedModels::Find(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : &it->second;
}

std::string ServedModels::NameList() const {
  return absl::StrJoin(models_, ", ", [](std::string* out, const auto& entry) {
    absl::StrAppend(out, entry.first);
  });
}

}  // namespace replicad
