#ifndef REPLICAD_CORE_BACKENDS_CPU_CPU_BACKEND_H_
#define REPLICAD_CORE_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/device/device.h"

namespace replicad {

// The CPU devices of this machine: cpu:N for each core this process may run on.
// Each reports the processor's model name and the machine's RAM.
std::vector<DeviceInfo> EnumerateCpuDevices();

struct CpuSlotOptions {
  // OpenMP threads of the slot's own worker thread (oneDNN runs on them).
  int threads = 1;
  // 3x3 stride-1 convolutions run as Winograd F(4x4, 3x3) where oneDNN has it:
  // about twice as fast, with a different rounding (see docs/status.md, "Numerics").
  bool winograd = true;
};

// How many compiled oneDNN primitives the process keeps cached besides those
// that live kernels hold (oneDNN's own default is 1024). The cache makes a
// second slot's plan of a size, or a plan rebuilt after eviction, cheaper to
// build, and keeps primitives of evicted plans alive: in the batch sweep of
// benchmarks/RESULTS.md (2026-12-01), 0 took the daemon from 152 to 127 MB
// after the sweep and from 1090 to 703 MB at its peak, and plan building from
// 0.35 to 0.49 s. Process-wide; call before slots are made.
// InvalidArgument for a negative capacity.
absl::Status SetCpuPrimitiveCacheCapacity(int capacity);

// A CPU slot on `info`'s device: a worker thread as its stream, a oneDNN
// engine and stream, kernels from the CPU kernel factory.
std::unique_ptr<Device> CreateCpuDevice(const DeviceInfo& info, const CpuSlotOptions& options);

// A CPU slot of one thread, made on first use and shared by the process, on
// which plans of devices without a kernel for a node fold it when its inputs
// are known (Device::host_folding_device): GPU slots return it. nullptr when
// the machine shows no CPU.
Device* HostFoldingDevice();

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_CPU_BACKEND_H_
