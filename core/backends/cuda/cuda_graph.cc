#include "core/backends/cuda/cuda_graph.h"

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"

namespace replicad {
namespace {

class CudaGraph final : public Device::RecordedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, std::string device)
      : exec_(exec), stream_(stream), device_(std::move(device)) {}
  // A launch still in flight completes first: CUDA frees the graph after it.
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }

  absl::Status Replay() override {
    REPLICAD_CUDA_RETURN_IF_ERROR(device_, cudaGraphLaunch(exec_, stream_));
    return absl::OkStatus();
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::string device_;
};

absl::Status NotRecorded(absl::string_view device, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat(device, ": the work could not be recorded as a CUDA graph: ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device::RecordedWork>> RecordCudaGraph(
    cudaStream_t stream, absl::string_view device, const std::function<absl::Status()>& issue) {
  REPLICAD_CUDA_RETURN_IF_ERROR(device,
                                cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  absl::Status issued;
  // The capture must end whatever happens in `issue`, or the slot's stream
  // would go on recording instead of running.
  try {
    issued = issue();
  } catch (const std::exception& e) {
    issued = absl::InternalError(absl::StrCat("an exception: ", e.what()));
  } catch (...) {
    issued = absl::InternalError("an exception");
  }
  cudaGraph_t graph = nullptr;
  // Ends the capture whatever happened inside it (an invalidated capture
  // ends with an error and no graph); nothing recorded has run.
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  // A call the capture refused leaves its error as this thread's last one:
  // not the next kernel launch's.
  cudaGetLastError();
  if (!issued.ok() || ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return NotRecorded(
        device, !issued.ok() ? issued.message() : absl::string_view(cudaGetErrorString(ended)));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();
    return NotRecorded(device, cudaGetErrorString(made));
  }
  return std::make_unique<CudaGraph>(exec, stream, std::string(device));
}

}  // namespace replicad
