#ifndef REPLICAD_CORE_DEVICE_DEVICE_MAP_H_
#define REPLICAD_CORE_DEVICE_DEVICE_MAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/device_id.h"

namespace replicad {

// One replica slot: its name, the device it runs on, and its relative share
// of every batch.
struct SlotAssignment {
  std::string name;  // "r0", or the context name of a device map.
  DeviceId device;
  double weight = 1.0;
};

// Parses one device id ("cuda:0", "cpu0") that must be in `available`:
// InvalidArgument listing the devices that are, otherwise.
absl::StatusOr<DeviceId> ParseAvailableDevice(absl::string_view text,
                                              const std::vector<DeviceInfo>& available);

// Parses --devices: "all" (expands to `all_slots`) or a comma-separated list
// such as "cpu:0,cpu:1,cpu:1" (a device listed twice carries two slots).
// Slots are named r0, r1, ... in order. A device that is not in `available`
// is InvalidArgument listing the devices that are.
absl::StatusOr<std::vector<SlotAssignment>> ParseDeviceList(
    absl::string_view text, const std::vector<DeviceInfo>& available,
    const std::vector<DeviceId>& all_slots);

// Parses a Theano-style context map, "r0->cpu0;r1->cpu0": one slot per
// mapping, named by its context. Context names are unique, non-empty, and may
// not contain "->" or ";". Unknown devices as in ParseDeviceList.
absl::StatusOr<std::vector<SlotAssignment>> ParseDeviceMap(
    absl::string_view text, const std::vector<DeviceInfo>& available);

// Parses --slot-weights, "3,1": one positive finite weight per slot, in slot
// order, and sets them. InvalidArgument on a count mismatch or a bad number.
absl::Status ApplySlotWeights(absl::string_view text, std::vector<SlotAssignment>* slots);

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_DEVICE_MAP_H_
