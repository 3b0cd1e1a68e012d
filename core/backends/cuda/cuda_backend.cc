#include "core/backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace replicad {

absl::StatusOr<std::vector<DeviceInfo>> EnumerateCudaDevices() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  // A build machine has the toolkit but no driver, a CPU node has no GPU:
  // both mean "no CUDA devices here", not a failure.
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver ||
      error == cudaErrorNotSupported || error == cudaErrorSystemNotReady) {
    cudaGetLastError();  // Clears the sticky error for later calls.
    return std::vector<DeviceInfo>{};
  }
  if (error != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaGetDeviceCount failed: ",
                                            cudaGetErrorName(error), ": ",
                                            cudaGetErrorString(error)));
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    error = cudaGetDeviceProperties(&prop, i);
    if (error != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cuda:", i, ": cudaGetDeviceProperties failed: ",
                                              cudaGetErrorString(error)));
    }
    devices.push_back(DeviceInfo{DeviceId{DeviceKind::kCuda, i}, prop.name,
                                 static_cast<uint64_t>(prop.totalGlobalMem),
                                 absl::StrCat(prop.major, ".", prop.minor)});
  }
  return devices;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const DeviceInfo& info) {
  return absl::UnimplementedError(absl::StrCat(
      DeviceIdToString(info.id), " (", info.name,
      "): replicas on CUDA devices are not implemented yet; use --devices cpu:N"));
}

}  // namespace replicad
