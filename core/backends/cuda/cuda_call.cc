#include "core/backends/cuda/cuda_call.h"

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cublas_library.h"

namespace replicad {
namespace {

absl::Status CallError(bool out_of_memory, absl::string_view device, absl::string_view call,
                       absl::string_view name, absl::string_view text) {
  std::string message = absl::StrCat(device, ": ", call, " failed: ", name);
  if (!text.empty() && text != name) absl::StrAppend(&message, " (", text, ")");
  return out_of_memory ? absl::ResourceExhaustedError(message) : absl::InternalError(message);
}

}  // namespace

absl::Status CudaCallStatus(cudaError_t result, absl::string_view device, absl::string_view call) {
  if (result == cudaSuccess) return absl::OkStatus();
  // A failed runtime call also leaves its error as the thread's last error,
  // which the next LastLaunchStatus would report as that kernel's launch
  // failure (e.g. after cudaMalloc ran out of memory and the caching
  // allocator's retry succeeded). This Status reports it; consume it here.
  // Sticky errors stay set whatever this does.
  cudaGetLastError();
  return CallError(result == cudaErrorMemoryAllocation, device, call, cudaGetErrorName(result),
                   cudaGetErrorString(result));
}

absl::Status CudaCallStatus(cudnnStatus_t result, absl::string_view device,
                            absl::string_view call) {
  if (result == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return CallError(result == CUDNN_STATUS_ALLOC_FAILED, device, call, cudnnGetErrorString(result),
                   "");
}

absl::Status CudaCallStatus(cublasStatus_t result, absl::string_view device,
                            absl::string_view call) {
  if (result == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusOr<const CublasLibrary*> cublas = OpenCublas();
  if (!cublas.ok()) {  // Not from cuBLAS, then; the code is all there is to say.
    return CallError(result == CUBLAS_STATUS_ALLOC_FAILED, device, call,
                     absl::StrCat("cublasStatus ", static_cast<int>(result)), "");
  }
  return CallError(result == CUBLAS_STATUS_ALLOC_FAILED, device, call,
                   (*cublas)->GetStatusName(result), (*cublas)->GetStatusString(result));
}

absl::Status CudaCallStatus(ncclResult_t result, absl::string_view device, absl::string_view call) {
  if (result == ncclSuccess) return absl::OkStatus();
  return CallError(false, device, call, absl::StrCat("ncclResult ", static_cast<int>(result)),
                   ncclGetErrorString(result));
}

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorDevicesUnavailable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

absl::Status LastLaunchStatus(absl::string_view device, absl::string_view kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return absl::OkStatus();
  return CudaCallStatus(error, device, absl::StrCat("launch of ", kernel));
}

}  // namespace replicad
