#include "core/device/device_map.h"

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

std::string AvailableList(const std::vector<DeviceInfo>& available) {
  return absl::StrJoin(available, ", ", [](std::string* out, const DeviceInfo& d) {
    absl::StrAppend(out, DeviceIdToString(d.id));
  });
}

}  // namespace

absl::StatusOr<DeviceId> ParseAvailableDevice(absl::string_view text,
                                              const std::vector<DeviceInfo>& available) {
  REPLICAD_ASSIGN_OR_RETURN(DeviceId id, ParseDeviceId(text));
  for (const DeviceInfo& d : available) {
    if (d.id == id) return id;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "device '", text, "' does not exist on this machine; available: ", AvailableList(available)));
}

absl::StatusOr<std::vector<SlotAssignment>> ParseDeviceList(
    absl::string_view text, const std::vector<DeviceInfo>& available,
    const std::vector<DeviceId>& all_slots) {
  std::vector<SlotAssignment> slots;
  text = absl::StripAsciiWhitespace(text);
  if (text == "all") {
    for (const DeviceId& id : all_slots) {
      slots.push_back({absl::StrCat("r", slots.size()), id, 1.0});
    }
    if (slots.empty()) return absl::FailedPreconditionError("no devices found for --devices all");
    return slots;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices '", text, "' has an empty entry; expected e.g. cpu:0,cpu:1"));
    }
    REPLICAD_ASSIGN_OR_RETURN(DeviceId id, ParseAvailableDevice(item, available));
    slots.push_back({absl::StrCat("r", slots.size()), id, 1.0});
  }
  return slots;
}

std::string ContextName(const SlotAssignment& slot) {
  if (slot.copy == 0) return slot.name;
  return slot.name.substr(0, slot.name.rfind('.'));
}

absl::StatusOr<std::vector<SlotAssignment>> ParseDeviceMap(
    absl::string_view text, const std::vector<DeviceInfo>& available) {
  std::vector<SlotAssignment> slots;
  std::set<std::string> names;
  for (absl::string_view mapping : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(mapping, "->");
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device-map entry '", mapping, "' must be NAME->DEVICE, e.g. r0->cpu0"));
    }
    std::string name(absl::StripAsciiWhitespace(parts[0]));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device-map entry '", mapping, "' has an empty context name"));
    }
    std::vector<absl::string_view> devices = absl::StrSplit(parts[1], ',');
    for (size_t copy = 0; copy < devices.size(); ++copy) {
      std::string slot = copy == 0 ? name : absl::StrCat(name, ".", copy);
      if (!names.insert(slot).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("--device-map names context '", slot, "' twice"));
      }
      absl::StatusOr<DeviceId> id =
          ParseAvailableDevice(absl::StripAsciiWhitespace(devices[copy]), available);
      if (!id.ok()) {
        return absl::Status(id.status().code(), absl::StrCat("--device-map entry '", mapping,
                                                             "': ", id.status().message()));
      }
      slots.push_back({std::move(slot), *id, 1.0, static_cast<int>(copy)});
    }
  }
  if (slots.empty()) {
    return absl::InvalidArgumentError("--device-map is empty; expected e.g. 'r0->cpu0;r1->cpu0'");
  }
  return slots;
}

absl::Status ApplySlotWeights(absl::string_view text, std::vector<SlotAssignment>* slots) {
  std::vector<absl::string_view> items = absl::StrSplit(text, ',');
  if (items.size() != slots->size()) {
    return absl::InvalidArgumentError(absl::StrCat("--slot-weights '", text, "' has ", items.size(),
                                                   " weights; expected ", slots->size(),
                                                   " (one per slot)"));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    double weight = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(items[i]), &weight) ||
        !std::isfinite(weight) || weight <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--slot-weights entry ", i, " is '", items[i],
                                                     "'; expected a positive number"));
    }
    (*slots)[i].weight = weight;
  }
  return absl::OkStatus();
}

}  // namespace replicad
