#ifndef REPLICAD_CORE_MODEL_DEFAULT_MODEL_H_
#define REPLICAD_CORE_MODEL_DEFAULT_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/compute_precision.h"
#include "core/model/model.h"

namespace replicad {

// The model `replicad serve` runs when none is named: a small CNN for 28x28x1
// images (Fashion-MNIST) with 10 classes, opset 13:
//   image float32[N,1,28,28]
//   -> Conv 16x3x3 pad 1 -> Relu -> MaxPool 2x2
//   -> Conv 32x3x3 pad 1 -> Relu -> MaxPool 2x2
//   -> Flatten -> Gemm 1568x128 -> Relu -> Gemm 128x10 -> logits float32[N,10]
//   -> Softmax -> probabilities float32[N,10]
// Weights are uniform in +-sqrt(6 / fan_in) from a fixed-seed SplitMix64, so
// every build and every machine starts from the same bytes.
inline constexpr char kDefaultModelName[] = "default";

// The serialized ONNX ModelProto.
std::string DefaultModelOnnxBytes();

absl::StatusOr<std::shared_ptr<const Model>> LoadDefaultModel(
    ComputePrecision precision = ComputePrecision::kFloat32);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_DEFAULT_MODEL_H_
