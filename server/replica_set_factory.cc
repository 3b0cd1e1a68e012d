#include "server/replica_set_factory.h"

#include "absl/strings/str_cat.h"

namespace replicad {

absl::StatusOr<std::unique_ptr<ReplicaSet>> BuildReplicaSet(std::shared_ptr<const Model> model,
                                                            const std::vector<DeviceInfo>& devices,
                                                            const ServingOptions& options,
                                                            SliceObserver* observer) {
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
        Replica::Create(model, slot, *std::move(device));
    if (!replica.ok()) return replica.status();
    replicas.push_back(*std::move(replica));
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
  return ReplicaSet::Create(std::move(model), std::move(replicas),
                            ReplicaSet::Options{options.merge_device, observer,
                                                options.transfer_chunks},
                            std::move(merge_stream));
}

}  // namespace replicad
