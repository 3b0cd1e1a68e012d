#include "core/model/default_model.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"

namespace replicad {
namespace {

// SplitMix64: tiny, and defined bit for bit (unlike std's distributions).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-bound, bound).
  float Uniform(float bound) {
    const double unit = static_cast<double>(Next() >> 11) * 0x1.0p-53;
    return static_cast<float>((2.0 * unit - 1.0) * bound);
  }

 private:
  uint64_t state_;
};

// Uniform in +-sqrt(6 / fan_in); zeros when fan_in is 0 (biases).
Tensor InitialWeight(SplitMix64* rng, Shape shape, int64_t fan_in) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  if (fan_in == 0) return t;
  const float bound = std::sqrt(6.0f / static_cast<float>(fan_in));
  float* data = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) data[i] = rng->Uniform(bound);
  return t;
}

}  // namespace

std::string DefaultModelOnnxBytes() {
  OnnxModelBuilder b("replicad_default_cnn", 13);
  SplitMix64 rng(20261121);
  b.AddInitializer("conv1.weight", InitialWeight(&rng, {16, 1, 3, 3}, 1 * 3 * 3));
  b.AddInitializer("conv1.bias", InitialWeight(&rng, {16}, 0));
  b.AddInitializer("conv2.weight", InitialWeight(&rng, {32, 16, 3, 3}, 16 * 3 * 3));
  b.AddInitializer("conv2.bias", InitialWeight(&rng, {32}, 0));
  b.AddInitializer("fc1.weight", InitialWeight(&rng, {128, 32 * 7 * 7}, 32 * 7 * 7));
  b.AddInitializer("fc1.bias", InitialWeight(&rng, {128}, 0));
  b.AddInitializer("fc2.weight", InitialWeight(&rng, {10, 128}, 128));
  b.AddInitializer("fc2.bias", InitialWeight(&rng, {10}, 0));

  auto conv_block = [&](const std::string& in, const std::string& layer) {
    onnx::NodeProto* conv =
        b.AddNode("Conv", {in, layer + ".weight", layer + ".bias"}, {layer + ".conv"});
    OnnxModelBuilder::SetInts(conv, "kernel_shape", {3, 3});
    OnnxModelBuilder::SetInts(conv, "pads", {1, 1, 1, 1});
    b.AddNode("Relu", {layer + ".conv"}, {layer + ".relu"});
    onnx::NodeProto* pool = b.AddNode("MaxPool", {layer + ".relu"}, {layer + ".pool"});
    OnnxModelBuilder::SetInts(pool, "kernel_shape", {2, 2});
    OnnxModelBuilder::SetInts(pool, "strides", {2, 2});
    return layer + ".pool";
  };
  const std::string features = conv_block(conv_block("image", "conv1"), "conv2");
  OnnxModelBuilder::SetInt(b.AddNode("Flatten", {features}, {"flat"}), "axis", 1);
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"flat", "fc1.weight", "fc1.bias"}, {"fc1.gemm"}),
                           "transB", 1);
  b.AddNode("Relu", {"fc1.gemm"}, {"fc1.relu"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"fc1.relu", "fc2.weight", "fc2.bias"}, {"logits"}),
                           "transB", 1);
  OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"logits"}, {"probabilities"}), "axis", 1);

  b.AddInput("image", DType::kFloat32, {kAnyDim, 1, 28, 28});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 10});
  b.AddOutput("probabilities", DType::kFloat32, {kAnyDim, 10});
  return b.Serialize();
}

absl::StatusOr<std::shared_ptr<const Model>> LoadDefaultModel(ComputePrecision precision) {
  OnnxImportOptions options;
  options.precision = precision;
  return LoadOnnxBytes(DefaultModelOnnxBytes(), kDefaultModelName, "<embedded>", options);
}

}  // namespace replicad
