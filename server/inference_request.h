#ifndef REPLICAD_SERVER_INFERENCE_REQUEST_H_
#define REPLICAD_SERVER_INFERENCE_REQUEST_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/serve/request_context.h"
#include "core/serve/serving_core.h"
#include "inference/grpc_service.pb.h"
#include "server/shared_memory_registry.h"

namespace replicad {

// An Open Inference Protocol inference request, whichever door it came
// through, in the serving core's terms. Both doors first decode their wire
// form into an inference::ModelInferRequest without tensor bytes (the HTTP
// door from JSON) plus the bytes each input carried; everything the protocol
// means by the request (version, parameters, shared memory, outputs) is
// decoded here, once.

// One input's bytes as the wire carried them: raw contents, typed contents,
// JSON data or a binary section. Absent when the request gave none (then the
// input must name a shared-memory region).
struct WireBytes {
  const void* data = nullptr;
  size_t bytes = 0;
  bool present = false;
};

// Where a tensor's bytes lie in one of the client's shared-memory regions, as
// its parameters name it.
struct TensorRegion {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  SharedMemoryView view;
};

struct DecodedInfer {
  InferRequest request;  // Its inputs view the wire bytes or `input_copies`.
  // Inputs read out of shared memory (see SharedMemoryView for why they are
  // copied); they must live as long as the request.
  // (vectors, not strings: a short string's bytes move with it.)
  std::vector<std::vector<char>> input_copies;
  std::map<std::string, TensorRegion> output_regions;  // By output name.
};

// Decodes `request` for the core and applies its parameters to `context`:
// "priority", "timeout" (microseconds, tightening the deadline); per tensor
// "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"
// (`shared_memory` null: refused as unsupported). Parameters the protocol
// defines but replicad does not honour ("classification") are Unimplemented;
// others are tolerated, as the protocol asks. InvalidArgument naming the
// field, the expected and the received value for anything malformed; the
// registry's error for a region it cannot find or that is too small.
absl::StatusOr<DecodedInfer> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                absl::Span<const WireBytes> input_bytes,
                                                const SharedMemoryRegistry* shared_memory,
                                                RequestContext* context);

// A ResponseWriter for the protocol: outputs placed in shared memory are
// computed into buffers of their own and written to their regions by
// WriteToRegions once the inference is done (InvalidArgument naming the
// output when the region is too small); every other output goes where the
// door's Place says.
class InferOutputs : public ResponseWriter {
 public:
  explicit InferOutputs(std::map<std::string, TensorRegion> regions = {})
      : regions_(std::move(regions)) {}

  absl::StatusOr<void*> AddOutput(const TensorSpec& spec, const TensorType& type) final;
  // After a successful inference: the outputs placed in shared memory, into
  // their regions; the region's error when the client's object shrank.
  absl::Status WriteToRegions() const;

 protected:
  // For a door that decodes the regions after making its writer.
  void set_regions(std::map<std::string, TensorRegion> regions) { regions_ = std::move(regions); }

  // Adds the output to the door's response and returns where its bytes go;
  // with `region`, they go to the region and the return value is ignored.
  virtual absl::StatusOr<void*> Place(const TensorSpec& spec, const TensorType& type,
                                      const TensorRegion* region) = 0;

 private:
  std::map<std::string, TensorRegion> regions_;
  // Outputs bound for shared memory: their bytes, and where they go.
  std::vector<std::pair<const TensorRegion*, std::vector<char>>> to_regions_;
};

// Reads a non-negative integer parameter (int64 or uint64); InvalidArgument
// naming `field` otherwise.
absl::StatusOr<uint64_t> UnsignedParameter(const inference::InferParameter& parameter,
                                           const std::string& field);
// A parameter's value for messages: true, 12, "text" (a string), ...
std::string ParameterText(const inference::InferParameter& parameter);

}  // namespace replicad

#endif  // REPLICAD_SERVER_INFERENCE_REQUEST_H_
