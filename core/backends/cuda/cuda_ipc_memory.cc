#include "core/backends/cuda/cuda_ipc_memory.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/scoped_gpu.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);

// The driver's cuMemGetAddressRange, found at run time: the runtime API has
// no call that gives an allocation's size, and replicad links the runtime
// only. Null where libcuda lacks it.
using AddressRangeFn = int (*)(unsigned long long* base, size_t* size,  // NOLINT(runtime/int)
                               unsigned long long address);             // NOLINT(runtime/int)

AddressRangeFn AddressRange() {
  static const AddressRangeFn fn = []() -> AddressRangeFn {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (driver == nullptr) driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (driver == nullptr) return nullptr;
    return reinterpret_cast<AddressRangeFn>(dlsym(driver, "cuMemGetAddressRange_v2"));
  }();
  return fn;
}

class CudaIpcMemory final : public SharedDeviceMemory {
 public:
  CudaIpcMemory(int device, void* address, uint64_t bytes)
      : device_(device), name_(absl::StrCat("cuda:", device)), address_(address), bytes_(bytes) {}
  ~CudaIpcMemory() override {
    ScopedGpu gpu(device_);
    cudaIpcCloseMemHandle(address_);
  }
  CudaIpcMemory(const CudaIpcMemory&) = delete;
  CudaIpcMemory& operator=(const CudaIpcMemory&) = delete;

  uint64_t bytes() const override { return bytes_; }
  int device() const override { return device_; }
  uintptr_t address() const override { return reinterpret_cast<uintptr_t>(address_); }

  absl::Status CopyToHost(uint64_t offset, size_t n, void* out) const override {
    return Copy(offset, n, out, static_cast<const char*>(address_) + offset,
                cudaMemcpyDeviceToHost);
  }

  absl::Status CopyFromHost(uint64_t offset, const void* data, size_t n) const override {
    return Copy(offset, n, static_cast<char*>(address_) + offset, data, cudaMemcpyHostToDevice);
  }

 private:
  // n bytes at `offset` of the allocation, one way or the other, waited for.
  absl::Status Copy(uint64_t offset, size_t n, void* to, const void* from,
                    cudaMemcpyKind kind) const {
    REPLICAD_RETURN_IF_ERROR(CheckRange(offset, n));
    ScopedGpu gpu(device_);
    REPLICAD_CUDA_RETURN_IF_ERROR(name_, cudaMemcpyAsync(to, from, n, kind, cudaStreamPerThread));
    REPLICAD_CUDA_RETURN_IF_ERROR(name_, cudaStreamSynchronize(cudaStreamPerThread));
    return absl::OkStatus();
  }

  absl::Status CheckRange(uint64_t offset, size_t n) const {
    if (offset > bytes_ || n > bytes_ - offset) {
      return absl::InternalError(absl::StrCat("a copy of bytes ", offset, " to ", offset + n,
                                              " of a shared allocation of ", bytes_, " bytes on ",
                                              name_));
    }
    return absl::OkStatus();
  }

  const int device_;
  const std::string name_;
  void* const address_;
  const uint64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> OpenCudaIpcMemory(
    int64_t device, absl::string_view raw_handle) {
  if (raw_handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_handle: expected the ", kIpcHandleBytes,
        " bytes of a cudaIpcMemHandle_t (cudaIpcGetMemHandle), received ", raw_handle.size()));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_id: expected a GPU of this server, 0 to ", count - 1, ", received ",
                     device, count == 0 ? " (it has no GPU)" : ""));
  }
  const std::string name = absl::StrCat("cuda:", device);
  ScopedGpu gpu(static_cast<int>(device));
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, raw_handle.data(), sizeof(handle));
  void* address = nullptr;
  REPLICAD_CUDA_RETURN_IF_ERROR(
      name, cudaIpcOpenMemHandle(&address, handle, cudaIpcMemLazyEnablePeerAccess));
  uint64_t bytes = 0;
  if (AddressRangeFn range = AddressRange()) {
    unsigned long long base = 0;  // NOLINT(runtime/int)
    size_t size = 0;
    const auto at = static_cast<unsigned long long>(  // NOLINT(runtime/int)
        reinterpret_cast<uintptr_t>(address));
    if (range(&base, &size, at) == 0 && base <= at) bytes = base + size - at;
  }
  return std::make_unique<CudaIpcMemory>(static_cast<int>(device), address, bytes);
}

}  // namespace replicad
