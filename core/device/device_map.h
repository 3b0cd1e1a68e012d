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
  // A device map's context with several devices ("dev0->cuda:0,cuda:2"),
  // one per copy of a placed model's pipeline: which device of its context
  // this slot is. Copy 0 is named by the context, copy k > 0 "CONTEXT.k".
  int copy = 0;
};

// The context a device-map slot is a copy of ("dev0" for "dev0.1").
std::string ContextName(const SlotAssignment& slot);

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
// not contain "->", ";" or ",". A context may list several devices,
// "dev0->cuda:0,cuda:2": one slot per device, copy k named "dev0.k" (a
// placed model runs one pipeline per copy; other models see every slot).
// Unknown devices as in ParseDeviceList.
absl::StatusOr<std::vector<SlotAssignment>> ParseDeviceMap(
    absl::string_view text, const std::vector<DeviceInfo>& available);

// Parses --slot-weights, "3,1": one positive finite weight per slot, in slot
// order, and sets them. InvalidArgument on a count mismatch or a bad number.
absl::Status ApplySlotWeights(absl::string_view text, std::vector<SlotAssignment>* slots);

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_DEVICE_MAP_H_
