#include "core/device/device_copy.h"

namespace replicad {

absl::StatusOr<Tensor> CopyToDevice(Device& device, const Tensor& host) {
  absl::StatusOr<std::shared_ptr<Buffer>> buffer = device.Allocate(host.byte_size());
  if (!buffer.ok()) return buffer.status();
  device.EnqueueCopy(host.raw_data(), host.location(), (*buffer)->data(), device.memory_location(),
                     host.byte_size());
  return Tensor::Create(host.dtype(), host.shape(), *std::move(buffer));
}

}  // namespace replicad
