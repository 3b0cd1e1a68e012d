#include "core/device/device_id.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace replicad {

std::string DeviceIdToString(const DeviceId& id) {
  return absl::StrCat(id.kind == DeviceKind::kCpu ? "cpu:" : "cuda:", id.ordinal);
}

absl::StatusOr<DeviceId> ParseDeviceId(absl::string_view text) {
  DeviceId id;
  absl::string_view rest;
  if (absl::StartsWith(text, "cuda")) {
    id.kind = DeviceKind::kCuda;
    rest = text.substr(4);
  } else if (absl::StartsWith(text, "cpu")) {
    id.kind = DeviceKind::kCpu;
    rest = text.substr(3);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", text, "' must be cpu:N or cuda:N (Theano's cpuN / cudaN also accepted)"));
  }
  if (absl::StartsWith(rest, ":")) rest.remove_prefix(1);
  if (rest.empty() && id.kind == DeviceKind::kCpu) return id;
  if (rest.empty() || !absl::SimpleAtoi(rest, &id.ordinal) || id.ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", text, "' has no valid ordinal; expected e.g. cpu:0 or cuda:1"));
  }
  return id;
}

const DeviceInfo* FindDevice(const std::vector<DeviceInfo>& devices, const DeviceId& id) {
  for (const DeviceInfo& d : devices) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

}  // namespace replicad
