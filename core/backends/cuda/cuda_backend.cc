#include "core/backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"

namespace replicad {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string VersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace

absl::StatusOr<std::vector<DeviceInfo>> EnumerateCudaDevices() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  // A build machine has the toolkit but no driver, a CPU node has no GPU:
  // both mean "no CUDA devices here", not a failure.
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver ||
      error == cudaErrorNotSupported || error == cudaErrorSystemNotReady) {
    cudaGetLastError();  // Clears the error for later calls.
    return std::vector<DeviceInfo>{};
  }
  if (error != cudaSuccess) return CudaCallStatus(error, "cuda", "cudaGetDeviceCount(&count)");
  int driver = 0;
  int runtime = 0;
  REPLICAD_CUDA_RETURN_IF_ERROR("cuda", cudaDriverGetVersion(&driver));
  REPLICAD_CUDA_RETURN_IF_ERROR("cuda", cudaRuntimeGetVersion(&runtime));
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    REPLICAD_CUDA_RETURN_IF_ERROR(absl::StrCat("cuda:", i), cudaGetDeviceProperties(&prop, i));
    devices.push_back(DeviceInfo{
        DeviceId{DeviceKind::kCuda, i}, prop.name, static_cast<uint64_t>(prop.totalGlobalMem),
        absl::StrCat(prop.major, ".", prop.minor), VersionText(driver), VersionText(runtime)});
  }
  return devices;
}

}  // namespace replicad
