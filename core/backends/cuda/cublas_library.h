#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUBLAS_LIBRARY_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUBLAS_LIBRARY_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace replicad {

// The cuBLAS calls the CUDA backend makes, from libcublas opened at run time
// rather than linked: loading libcublas (and the libcublasLt it needs) costs
// a process about 150 MB of resident memory and 0.1 s at start, GPU or not,
// for the dozen calls a GPU slot makes. Members are the library's own
// functions (cublas_v2.h's names without the prefix).
struct CublasLibrary {
  decltype(&cublasCreate_v2) Create;
  decltype(&cublasDestroy_v2) Destroy;
  decltype(&cublasSetStream_v2) SetStream;
  decltype(&cublasSetWorkspace_v2) SetWorkspace;
  decltype(&cublasSetMathMode) SetMathMode;
  decltype(&cublasSetPointerMode_v2) SetPointerMode;
  decltype(&cublasSscal_v2_64) Sscal_64;
  decltype(&cublasSgemm_v2_64) Sgemm_64;
  decltype(&cublasSgemmStridedBatched_64) SgemmStridedBatched_64;
  decltype(&cublasGemmEx_64) GemmEx_64;
  decltype(&cublasGemmStridedBatchedEx_64) GemmStridedBatchedEx_64;
  decltype(&cublasGetStatusName) GetStatusName;
  decltype(&cublasGetStatusString) GetStatusString;
};

// libcublas.so.<the major version built against>, opened on the first call
// (once per process; later calls return the same). FailedPrecondition naming
// the file and the loader's reason when it cannot be opened or lacks a
// function: a GPU slot then fails to start, saying so.
absl::StatusOr<const CublasLibrary*> OpenCublas();

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUBLAS_LIBRARY_H_
