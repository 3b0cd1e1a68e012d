#ifndef REPLICAD_CORE_SERVE_REQUEST_VALIDATION_H_
#define REPLICAD_CORE_SERVE_REQUEST_VALIDATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model.h"

namespace replicad {

// One input tensor of a request, as decoded from the wire: bytes not yet checked.
struct RequestInput {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Checks `inputs` against `model`'s inputs and returns them in model order as
// host Tensors that view the request's bytes (no copy, except of an input
// whose bytes are not aligned for its element type: kernels read it through
// typed pointers); `keep_alive` keeps those bytes valid for the Tensors'
// lifetime. Every failure is
// InvalidArgument with a message naming the field (inputs[i] and its name),
// the expected and the received value:
//   unknown, missing or duplicated input; wrong dtype; wrong rank; a fixed
//   dimension that differs; a negative dimension; a byte count that does not
//   match dtype and shape; inputs with different batch sizes; an empty batch;
//   a batch over `max_batch_size` (0: no limit).
absl::StatusOr<std::vector<Tensor>> BindInputs(const Model& model,
                                               const std::vector<RequestInput>& inputs,
                                               int64_t max_batch_size,
                                               std::shared_ptr<const void> keep_alive);

// The targets of a TrainStep, viewing the request's bytes like BindInputs:
// InvalidArgument naming `targets` for a dtype other than float32/int64, a
// rank-0 shape, dim 0 other than `batch`, or a byte count that does not match.
absl::StatusOr<Tensor> BindTargets(const RequestInput& targets, int64_t batch,
                                   std::shared_ptr<const void> keep_alive);

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_REQUEST_VALIDATION_H_
