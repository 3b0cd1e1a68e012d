#ifndef REPLICAD_CORE_DEVICE_DEVICE_ID_H_
#define REPLICAD_CORE_DEVICE_DEVICE_ID_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace replicad {

enum class DeviceKind { kCpu, kCuda };

// A physical device of this machine: "cpu:0", "cuda:1".
struct DeviceId {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;

  bool operator==(const DeviceId& o) const { return kind == o.kind && ordinal == o.ordinal; }
  bool operator!=(const DeviceId& o) const { return !(*this == o); }
  bool operator<(const DeviceId& o) const {
    return kind != o.kind ? kind < o.kind : ordinal < o.ordinal;
  }
};

// "cpu:0" / "cuda:1".
std::string DeviceIdToString(const DeviceId& id);

// Accepts "cpu:0", "cpu0", "cuda:1", "cuda1" (Theano's spelling); "cpu" means
// "cpu:0". InvalidArgument with the received text otherwise.
absl::StatusOr<DeviceId> ParseDeviceId(absl::string_view text);

// What enumeration reports about a device.
struct DeviceInfo {
  DeviceId id;
  std::string name;                // e.g. "Intel(R) Xeon(R) ..." or "NVIDIA H100 80GB HBM3".
  uint64_t memory_bytes = 0;       // Host RAM for CPUs, device memory for GPUs.
  std::string compute_capability;  // "9.0" for CUDA devices; empty for CPUs.
  std::string driver_version;      // CUDA driver API version, "13.0"; empty for CPUs.
  std::string runtime_version;     // CUDA runtime replicad runs with, "13.0"; empty for CPUs.
};

// The device `id` among `devices`, or nullptr.
const DeviceInfo* FindDevice(const std::vector<DeviceInfo>& devices, const DeviceId& id);

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_DEVICE_ID_H_
