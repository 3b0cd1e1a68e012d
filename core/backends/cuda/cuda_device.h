#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_DEVICE_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/device/device.h"

namespace replicad {

// Internal to the CUDA backend: a slot on one GPU. Its stream is a host
// thread (which made the GPU current) issuing work, in order, onto its own
// non-blocking CUDA stream, with its own cuDNN and cuBLAS handles bound to
// that stream; several slots on one GPU run concurrently. Device memory
// comes from the slot's CachingAllocator (no cudaMalloc per request after
// warm-up). Host<->device copies go through two pinned staging buffers in
// chunks, so the CPU's copy of one chunk overlaps the DMA of the other.
//
// Every failure names the device and the call (cuda_call.h). A sticky CUDA
// error marks the slot unhealthy for good (Device::health). Fails to create
// when the GPU, stream or library handles cannot be set up.
absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice(const DeviceInfo& info,
                                                      const CudaSlotOptions& options);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_DEVICE_H_
