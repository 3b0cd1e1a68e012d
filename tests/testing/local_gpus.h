#ifndef REPLICAD_TESTS_TESTING_LOCAL_GPUS_H_
#define REPLICAD_TESTS_TESTING_LOCAL_GPUS_H_

#include <vector>

#include "core/backends/backends.h"

namespace replicad::testing {

// This machine's GPUs as the backends enumerate them: none without a GPU or
// in a build without CUDA, for GPU tests to skip. (Header-only: its users
// link replicad_backends.)
inline std::vector<DeviceInfo> LocalGpus() {
  std::vector<DeviceInfo> gpus;
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return gpus;
  for (const DeviceInfo& d : *devices) {
    if (d.id.kind == DeviceKind::kCuda) gpus.push_back(d);
  }
  return gpus;
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_LOCAL_GPUS_H_
