#include "core/backends/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

absl::StatusOr<CublasLibrary> Open() {
  const std::string file = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  // Local: its symbols stay out of the process's namespace, so nothing else
  // binds to them by accident.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", file, " (cuBLAS, for GPU slots): ", dlerror()));
  }
  CublasLibrary library;
  absl::Status missing;
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    if (function == nullptr && missing.ok()) {
      missing = absl::FailedPreconditionError(absl::StrCat(file, " has no ", name));
    }
  };
  resolve(library.Create, "cublasCreate_v2");
  resolve(library.Destroy, "cublasDestroy_v2");
  resolve(library.SetStream, "cublasSetStream_v2");
  resolve(library.SetWorkspace, "cublasSetWorkspace_v2");
  resolve(library.SetMathMode, "cublasSetMathMode");
  resolve(library.SetPointerMode, "cublasSetPointerMode_v2");
  resolve(library.Sscal_64, "cublasSscal_v2_64");
  resolve(library.Sgemm_64, "cublasSgemm_v2_64");
  resolve(library.SgemmStridedBatched_64, "cublasSgemmStridedBatched_64");
  resolve(library.GemmEx_64, "cublasGemmEx_64");
  resolve(library.GemmStridedBatchedEx_64, "cublasGemmStridedBatchedEx_64");
  resolve(library.GetStatusName, "cublasGetStatusName");
  resolve(library.GetStatusString, "cublasGetStatusString");
  if (!missing.ok()) {
    dlclose(handle);
    return missing;
  }
  return library;  // The handle stays open for the process's life.
}

}  // namespace

absl::StatusOr<const CublasLibrary*> OpenCublas() {
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(Open());
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace replicad
