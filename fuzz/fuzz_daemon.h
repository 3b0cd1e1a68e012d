#ifndef REPLICAD_FUZZ_FUZZ_DAEMON_H_
#define REPLICAD_FUZZ_FUZZ_DAEMON_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/serve/serving_core.h"
#include "fuzz/fuzz_check.h"
#include "server/error_message.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"

namespace replicad::fuzz {

// What `replicad serve --model fuzz=FILE` runs, in-process and without
// sockets, for the request fuzzers: the local repository, the model manager,
// the serving core on two CPU slots, metrics, training (no checkpoint root,
// so nothing is ever written) and an empty shared-memory registry. FILE is
// kModelName's ONNX file, written to a temporary directory at start:
//   x float32[N,4] -> Gemm (W 3x4, b 3) -> + offset float32[N,3] -> logits [N,3]
//   logits -> Softmax -> probabilities [N,3]
// Two inputs, so that duplicated, missing and mismatched inputs are reachable.
// Made on first use and never destroyed (libFuzzer exits without unwinding).
class FuzzDaemon {
 public:
  static constexpr char kModelName[] = "fuzz";

  static FuzzDaemon& Get();

  ServingCore& core() { return *core_; }
  ServerMetrics& metrics() { return *metrics_; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  SharedMemoryRegistry* shared_memory() { return shared_memory_.get(); }

 private:
  FuzzDaemon();

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<Retirer> retirer_;
  std::unique_ptr<ModelManager> models_;
  std::unique_ptr<ServingCore> core_;
  std::unique_ptr<SharedMemoryRegistry> shared_memory_;
};

// The fuzz model's ONNX bytes (FuzzDaemon serves them as kModelName).
std::string TinyModelOnnx();

// True for the codes a request may be refused with; INTERNAL, UNKNOWN and
// DATA_LOSS would mean the server failed, not the request.
bool IsRequestError(int code);

// Longest message a refusal may carry: BoundedMessage's cap on echoed client
// text, with room for its "... (N more bytes)".
inline constexpr size_t kMaxRefusalMessage = kMaxErrorMessageBytes + 64;

// The gRPC fuzzers' check of a refused call `rpc`: answered within their 10 s
// deadline, with a request error code (IsRequestError) and a message of at
// most kMaxRefusalMessage bytes; anything else is Violated.
void CheckRefusal(const grpc::Status& status, const char* rpc);

}  // namespace replicad::fuzz

#endif  // REPLICAD_FUZZ_FUZZ_DAEMON_H_
