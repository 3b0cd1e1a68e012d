#ifndef REPLICAD_CORE_BACKENDS_BACKENDS_H_
#define REPLICAD_CORE_BACKENDS_BACKENDS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/device.h"
#include "core/device/shared_device_memory.h"
#include "core/device/slot_all_reduce.h"

namespace replicad {

// The single place that knows which backends this build has.

// Every device of this machine that some built backend can see: CPUs first,
// then CUDA devices when the CUDA backend is built.
absl::StatusOr<std::vector<DeviceInfo>> EnumerateDevices();

// What "--devices all" means: every GPU, one slot each; with none, CPU slots
// of `threads_per_slot` cores each (at least one).
std::vector<DeviceId> DefaultSlots(const std::vector<DeviceInfo>& devices, int threads_per_slot);

struct SlotOptions {
  int threads_per_slot = 1;  // CPU slots: OpenMP threads of the slot.
  bool winograd = true;      // CPU slots: see CpuSlotOptions::winograd.
  bool tf32 = false;         // CUDA slots: see CudaSlotOptions::tf32.
  // CPU slots of one thread: a batch of one slice, while the model's other
  // slots are idle, runs with their cores too (ReplicaSet's wide replica).
  bool lend_idle_cores = true;
  // CUDA slots: see CudaSlotOptions::cudnn_deterministic.
  bool cudnn_deterministic = true;
  // CUDA slots: see CudaSlotOptions::graphs.
  bool cuda_graphs = false;
};

// The CPU backend's cache of compiled kernels beyond those plans hold (see
// SetCpuPrimitiveCacheCapacity in cpu/cpu_backend.h). Process-wide, before
// any slot is made; InvalidArgument for a negative capacity.
absl::Status SetCpuKernelCacheCapacity(int capacity);

// A new slot (its own stream) on the device `info` describes. Unimplemented
// for a device kind whose backend cannot run replicas in this build.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceInfo& info,
                                                     const SlotOptions& options);

// The on-device gradient reduction across `slots` (slots this backend made,
// in participant order; they must outlive it) and, with `peers`, the other
// ranks' slots. Unimplemented naming the slot for a kind without one:
// host-memory slots are reduced by the host.
absl::StatusOr<std::unique_ptr<SlotAllReduce>> CreateSlotAllReduce(
    const std::vector<Device*>& slots, const SlotAllReducePeers* peers = nullptr);

// Whether this build opens other processes' GPU allocations (CUDA IPC
// handles, for the CUDA shared-memory extension).
bool CanOpenSharedDeviceMemory();

// Opens the GPU allocation `raw_handle` (a cudaIpcMemHandle_t's bytes)
// names on GPU `device` (cuda/cuda_ipc_memory.h). Unimplemented in a build
// without CUDA.
absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> OpenSharedDeviceMemory(
    int64_t device, absl::string_view raw_handle);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_BACKENDS_H_
