#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_SLOT_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_SLOT_H_

#include <cuda_runtime_api.h>

#include "core/device/device.h"

namespace replicad {

// Internal to the CUDA backend: the CUDA stream of a slot CreateCudaDevice
// made, for the backend's collectives, which issue work on it from the
// slot's thread; nullptr for any other device. Valid while the slot lives.
cudaStream_t CudaSlotStream(Device& device);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_SLOT_H_
