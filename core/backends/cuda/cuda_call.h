#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_CALL_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_CALL_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace replicad {

// Internal to the CUDA backend: the Status of one CUDA runtime, cuDNN, cuBLAS
// or NCCL call, naming the device ("cuda:0"), the call as written and the
// library's own error name and text. Out-of-memory results are
// ResourceExhausted (a request fails, the daemon lives on); everything else is
// Internal. Success is OK.
absl::Status CudaCallStatus(cudaError_t result, absl::string_view device, absl::string_view call);
absl::Status CudaCallStatus(cudnnStatus_t result, absl::string_view device, absl::string_view call);
absl::Status CudaCallStatus(cublasStatus_t result, absl::string_view device,
                            absl::string_view call);
absl::Status CudaCallStatus(ncclResult_t result, absl::string_view device, absl::string_view call);

// Errors after which the CUDA context of the process is unusable until it
// restarts (illegal address, ECC, launch failure, ...): the slot that saw one
// leaves the split and readiness.
bool IsStickyCudaError(cudaError_t error);

// The error of the most recent kernel launch on this thread (launches return
// nothing themselves), as a Status naming the device and the kernel.
absl::Status LastLaunchStatus(absl::string_view device, absl::string_view kernel);

}  // namespace replicad

// Evaluates `call` (a CUDA, cuDNN, cuBLAS or NCCL call) once and returns its
// Status from the enclosing function unless it succeeded. `device` is a
// string naming the device for the message.
#define REPLICAD_CUDA_RETURN_IF_ERROR(device, call)                                             \
  do {                                                                                          \
    ::absl::Status replicad_cuda_status_ = ::replicad::CudaCallStatus((call), (device), #call); \
    if (!replicad_cuda_status_.ok()) return replicad_cuda_status_;                              \
  } while (0)

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_CALL_H_
