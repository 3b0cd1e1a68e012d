#ifndef REPLICAD_CORE_MODEL_ONNX_IMPORT_H_
#define REPLICAD_CORE_MODEL_ONNX_IMPORT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/compute_precision.h"
#include "core/model/model.h"
#include "core/tensor/tensor.h"

namespace replicad {

struct OnnxImportOptions {
  // Graph inputs to bind to fixed values: they become initializers. Used for
  // inputs whose values a shape rule needs (e.g. Reshape's target shape).
  std::map<std::string, Tensor> bind_inputs;
  // Rewrite the graph for inference (see graph_optimizer.h).
  bool optimize = true;
  // The precision of its products (compute_precision.h); marked after the
  // rewrites, on a float32 model's convolutions and weight products.
  ComputePrecision precision = ComputePrecision::kFloat32;
};

// Loads an ONNX model: converts a model older than opset 11 to opset 11 with
// ONNX's version converter, runs ONNX's checker and shape inference, requires
// an opset of the default domain between 11 and 17, widens a float16 or
// bfloat16 model to compute in float32 inside (half_float_widening.h; its
// inputs and outputs keep their types), converts the graph to the engine's IR,
// optimizes it for inference (unless told not to) and keeps the initializers
// as host tensors (the template).
// Errors:
//  - NotFound: the file does not exist or cannot be read.
//  - InvalidArgument: not an ONNX model, the checker or shape inference
//    rejects it, a graph output no node produces, a stride or dilation that
//    is not positive (naming the node), an initializer or tensor attribute
//    whose raw_data is not what its dims and type need, below opset 7 a Gemm
//    whose A or B is not of known rank 2, an unsupported dtype of an input,
//    output or initializer (naming it).
//  - Unimplemented: operators the engine lacks (the message names every
//    unsupported op type with its nodes); an opset above 17; an old model
//    ONNX's converter cannot bring to opset 11 (with its reason).
absl::StatusOr<std::shared_ptr<const Model>> LoadOnnxFile(const std::string& path,
                                                          const std::string& name,
                                                          const OnnxImportOptions& options = {});

// As LoadOnnxFile, from serialized ModelProto bytes; `source` names them in
// messages and in Model::source().
absl::StatusOr<std::shared_ptr<const Model>> LoadOnnxBytes(const std::string& bytes,
                                                           const std::string& name,
                                                           const std::string& source,
                                                           const OnnxImportOptions& options = {});

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ONNX_IMPORT_H_
