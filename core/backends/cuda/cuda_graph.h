#ifndef REPLICAD_CORE_BACKENDS_CUDA_CUDA_GRAPH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_CUDA_GRAPH_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/device.h"

namespace replicad {

// Internal to the CUDA backend: what `issue` enqueues on `stream` recorded
// as a CUDA graph (stream capture, this thread only) and instantiated, for
// Replay to launch on `stream` again as one unit: the same kernels on the
// same pointers. `issue` runs once, during the capture; nothing it enqueues
// runs then. FailedPrecondition naming `device` when the capture fails (a
// call the capture does not allow: a stream or event wait on the host, a
// copy from pageable memory, a cudaMalloc) or `issue` fails; nothing is
// left enqueued on `stream` and no error stays set for the next launch.
// Call on the thread that issues `stream`'s work, its GPU current.
absl::StatusOr<std::unique_ptr<Device::RecordedWork>> RecordCudaGraph(
    cudaStream_t stream, absl::string_view device, const std::function<absl::Status()>& issue);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_CUDA_GRAPH_H_
