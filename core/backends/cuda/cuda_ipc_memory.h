#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_IPC_MEMORY_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_IPC_MEMORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/shared_device_memory.h"

namespace replicad {

// Opens the GPU allocation another process exported with
// cudaIpcGetMemHandle. `raw_handle` is the handle's 64 bytes; `device` the
// GPU that holds it, as this process numbers its GPUs (Triton's device_id).
// InvalidArgument naming the field for a handle of another size or a device
// this process does not have; the failing call's status (naming
// cudaIpcOpenMemHandle) when CUDA refuses the handle: another machine's, a
// freed allocation's, or one this process exported itself. Copies run on
// the calling thread's default stream (cudaStreamPerThread), so they wait
// for no slot's work.
absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> OpenCudaIpcMemory(int64_t device,
                                                                      absl::string_view raw_handle);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_IPC_MEMORY_H_
