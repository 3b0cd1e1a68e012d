#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_BACKEND_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"

namespace replicad {

// The CUDA devices the runtime reports, with name, memory and compute
// capability. A machine without a driver or without a GPU has zero devices;
// only an unexpected runtime failure is an error (naming the call).
absl::StatusOr<std::vector<DeviceInfo>> EnumerateCudaDevices();

// A slot on a CUDA device. Unimplemented until the CUDA kernels land.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const DeviceInfo& info);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_BACKEND_H_
