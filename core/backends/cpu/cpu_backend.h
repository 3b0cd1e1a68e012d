#ifndef REPLICAD_CORE_BACKENDS_CPU_CPU_BACKEND_H_
#define REPLICAD_CORE_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>
#include <vector>

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

// A CPU slot on `info`'s device: a worker thread as its stream, a oneDNN
// engine and stream, kernels from the CPU kernel factory.
std::unique_ptr<Device> CreateCpuDevice(const DeviceInfo& info, const CpuSlotOptions& options);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_CPU_BACKEND_H_
