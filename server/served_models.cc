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

const DeviceInfo* FindDevice(const std::vector<DeviceInfo>& devices, const DeviceId& id) {
  for (const DeviceInfo& d : devices) {
    if (d.id == id) return &d;
  }
  return nullptr;
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
    std::vector<std::unique_ptr<Replica>> replicas;
    for (const SlotAssignment& slot : options.slots) {
      const DeviceInfo* info = FindDevice(devices, slot.device);
      if (info == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("slot ", slot.name, ": no device ", DeviceIdToString(slot.device)));
      }
      absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*info, options.slot_options);
      if (!device.ok()) return device.status();
      absl::StatusOr<std::unique_ptr<Replica>> replica =
          Replica::Create(*model, slot, *std::move(device));
      if (!replica.ok()) return replica.status();
      replicas.push_back(*std::move(replica));
    }
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set = ReplicaSet::Create(
        *model, std::move(replicas), ReplicaSet::Options{options.merge_device, observer});
    if (!set.ok()) return set.status();
    served->models_[source.name] =
        ServedModel{*std::move(model), *std::move(set), options.max_batch_size};
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
