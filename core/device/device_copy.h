#ifndef REPLICAD_CORE_DEVICE_DEVICE_COPY_H_
#define REPLICAD_CORE_DEVICE_DEVICE_COPY_H_

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/tensor/tensor.h"

namespace replicad {

// A tensor in `device`'s memory holding `host`'s values once the copy this
// enqueues on the device's stream has run (Synchronize before reading it;
// `host` must stay alive until then). Fails as Device::Allocate does.
absl::StatusOr<Tensor> CopyToDevice(Device& device, const Tensor& host);

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_DEVICE_COPY_H_
