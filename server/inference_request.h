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

// The memory a request's inputs point into besides the wire bytes; it must
// live as long as the request (InferOutputs::HoldInputs keeps it).
struct InputMemory {
  // Regions read in place: held so that they stay mapped, and checked
  // (CheckIntact) when the inference is done.
  std::vector<SharedMemoryView> in_place;
  // Inputs copied out of shared memory, where they cannot be read in place:
  // misaligned for their dtype, overlapping an output's range, or in a
  // region whose trap fired. (vectors, not strings: a short string's bytes
  // move with it.)
  std::vector<std::vector<char>> copies;
};

struct DecodedInfer {
  InferRequest request;  // Its inputs view the wire bytes or `inputs`.
  InputMemory inputs;
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

// A ResponseWriter for the protocol. An output placed in shared memory is
// computed straight into its region when it can be (intact, aligned for its
// dtype); otherwise into a buffer of its own that FinishRegions writes to the
// region once the inference is done. So outputs may land in the client's
// region even when the request then fails, as in Triton. Every other output
// goes where the door's Place says.
class InferOutputs : public ResponseWriter {
 public:
  explicit InferOutputs(std::map<std::string, TensorRegion> regions = {})
      : regions_(std::move(regions)) {}

  // InvalidArgument naming the output when its region is too small.
  absl::StatusOr<void*> AddOutput(const TensorSpec& spec, const TensorType& type) final;
  // Keeps the request's input memory (DecodedInfer::inputs) as long as this
  // writer lives.
  void HoldInputs(InputMemory inputs) { inputs_ = std::move(inputs); }
  // After a successful inference: checks every region used in place (a
  // client that shrank its object during the run gets the shrink error, not
  // the zeros the trap left), then writes the outputs computed aside into
  // their regions (the region's error when the client's object shrank).
  absl::Status FinishRegions() const;

 protected:
  // For a door that decodes the regions after making its writer.
  void set_regions(std::map<std::string, TensorRegion> regions) { regions_ = std::move(regions); }

  // Adds the output to the door's response and returns where its bytes go;
  // with `region`, they go to the region and the return value is ignored.
  virtual absl::StatusOr<void*> Place(const TensorSpec& spec, const TensorType& type,
                                      const TensorRegion* region) = 0;

 private:
  std::map<std::string, TensorRegion> regions_;
  InputMemory inputs_;
  // Outputs written in place, to check; outputs computed aside: their bytes,
  // and where they go.
  std::vector<const TensorRegion*> in_place_;
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
