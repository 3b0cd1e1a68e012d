#include "core/backends/backends.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/cpu_backend.h"
#if REPLICAD_WITH_CUDA
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_ipc_memory.h"
#include "core/base/status_macros.h"
#endif

namespace replicad {

absl::StatusOr<std::vector<DeviceInfo>> EnumerateDevices() {
  std::vector<DeviceInfo> devices = EnumerateCpuDevices();
#if REPLICAD_WITH_CUDA
  REPLICAD_ASSIGN_OR_RETURN(std::vector<DeviceInfo> cuda, EnumerateCudaDevices());
  devices.insert(devices.end(), cuda.begin(), cuda.end());
#endif
  return devices;
}

std::vector<DeviceId> DefaultSlots(const std::vector<DeviceInfo>& devices, int threads_per_slot) {
  std::vector<DeviceId> gpus;
  for (const DeviceInfo& d : devices) {
    if (d.id.kind == DeviceKind::kCuda) gpus.push_back(d.id);
  }
  if (!gpus.empty()) return gpus;
  int cpus = 0;
  for (const DeviceInfo& d : devices) cpus += d.id.kind == DeviceKind::kCpu ? 1 : 0;
  const int width = std::max(1, threads_per_slot);
  std::vector<DeviceId> slots;
  // Slot i starts at core i * width, so slots tile the cores; a slot wider
  // than the machine still gets one slot, on cpu:0.
  for (int first_core = 0; first_core + width <= cpus || slots.empty(); first_core += width) {
    slots.push_back(DeviceId{DeviceKind::kCpu, first_core < cpus ? first_core : 0});
  }
  return slots;
}

absl::Status SetCpuKernelCacheCapacity(int capacity) {
  return SetCpuPrimitiveCacheCapacity(capacity);
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceInfo& info,
                                                     const SlotOptions& options) {
  switch (info.id.kind) {
    case DeviceKind::kCpu:
      return CreateCpuDevice(info, CpuSlotOptions{options.threads_per_slot, options.winograd});
    case DeviceKind::kCuda:
#if REPLICAD_WITH_CUDA
      CudaSlotOptions cuda;
      cuda.tf32 = options.tf32;
      cuda.cudnn_deterministic = options.cudnn_deterministic;
      cuda.graphs = options.cuda_graphs;
      return CreateCudaDevice(info, cuda);
#else
      return absl::UnimplementedError(
          absl::StrCat(DeviceIdToString(info.id),
                       ": this replicad was built without CUDA (REPLICAD_WITH_CUDA)"));
#endif
  }
  return absl::InternalError("unknown device kind");
}

absl::StatusOr<std::unique_ptr<SlotAllReduce>> CreateSlotAllReduce(
    const std::vector<Device*>& slots, const SlotAllReducePeers* peers) {
  for (const Device* slot : slots) {
    if (slot->info().id.kind != DeviceKind::kCuda) {
      return absl::UnimplementedError(
          absl::StrCat(DeviceIdToString(slot->info().id),
                       ": only CUDA slots reduce on the device; host slots reduce on the host"));
    }
  }
#if REPLICAD_WITH_CUDA
  return CreateNcclAllReduce(slots, peers);
#else
  (void)peers;
  return absl::UnimplementedError("this replicad was built without CUDA (REPLICAD_WITH_CUDA)");
#endif
}

bool CanOpenSharedDeviceMemory() {
#if REPLICAD_WITH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> OpenSharedDeviceMemory(
    int64_t device, absl::string_view raw_handle) {
#if REPLICAD_WITH_CUDA
  return OpenCudaIpcMemory(device, raw_handle);
#else
  (void)device;
  (void)raw_handle;
  return absl::UnimplementedError(
      "CUDA shared memory: this replicad was built without CUDA (REPLICAD_WITH_CUDA)");
#endif
}

}  // namespace replicad
