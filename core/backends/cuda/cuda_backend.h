#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_BACKEND_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/slot_all_reduce.h"

namespace replicad {

// The CUDA devices the runtime reports, with name, memory, compute
// capability and the driver and runtime versions. A machine without a driver
// or without a GPU has zero devices; only an unexpected runtime failure is an
// error (naming the call).
absl::StatusOr<std::vector<DeviceInfo>> EnumerateCudaDevices();

struct CudaSlotOptions {
  // TF32 tensor cores for float32 convolutions and matrix products (faster;
  // products rounded to a 10-bit mantissa). Off: full float32.
  bool tf32 = false;
  // cuDNN convolution algorithms that give the same bits on every run (the
  // default; where none fits the workspace limit, the fastest that does).
  // Off: cuDNN's fastest, which may sum with atomics in a varying order, as
  // PyTorch's default (torch.backends.cudnn.deterministic = False) picks.
  bool cudnn_deterministic = true;
  // The most scratch memory one cuDNN convolution may use, in bytes.
  size_t max_workspace_bytes = size_t{256} << 20;
  // CUDA graphs: a plan's run on one set of buffers is recorded once
  // (Device::Record) and replayed as one launch, saving the host's per-kernel
  // launch work (small batches). Off: every kernel launched each run.
  bool graphs = false;
};

// A new slot (its own CUDA stream, handles and memory pool) on the GPU that
// `info` describes; errors name the device and the failing call.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const DeviceInfo& info,
                                                         const CudaSlotOptions& options);

// Gradient reduction across CUDA slots (made by CreateCudaDevice, in
// participant order): slots that share a GPU first sum on it, then one
// NCCL all-reduce per call runs across the GPUs, on a stream of its own per
// slot so it overlaps the slot's later work until Join. Communicators are
// made here, once; with `peers` (other ranks' slots take part), at the
// first AllReduce instead: one communicator spans every rank's GPUs, its
// unique id handed round by peers->all_gather, and each wait for another
// rank is bounded by peers->timeout. Errors name the device and the call.
absl::StatusOr<std::unique_ptr<SlotAllReduce>> CreateNcclAllReduce(
    const std::vector<Device*>& slots, const SlotAllReducePeers* peers = nullptr);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_BACKEND_H_
