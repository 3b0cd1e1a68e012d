#include "tests/testing/test_models.h"

#include <algorithm>
#include <cmath>

#include "absl/synchronization/notification.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "gtest/gtest.h"

namespace replicad::testing {

Tensor RandomTensor(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  uint64_t state = seed;
  float* data = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    data[i] = static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return t;
}

Tensor Floats(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor Int64s(Shape shape, const std::vector<int64_t>& values) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

std::string TwoInputTwoOutputOnnx() {
  OnnxModelBuilder b("two_in_two_out", 13);
  b.AddInitializer("conv.w", RandomTensor({2, 3, 3, 3}, 1));
  b.AddInitializer("conv.b", RandomTensor({2}, 2));
  b.AddInitializer("fc.w", RandomTensor({5, 2}, 3));
  b.AddInitializer("fc.b", RandomTensor({2}, 4));
  b.AddInitializer("mm.w", RandomTensor({5, 3}, 5));
  b.AddInitializer("scale", RandomTensor({3}, 6));
  OnnxModelBuilder::SetInts(b.AddNode("Conv", {"image", "conv.w", "conv.b"}, {"c"}), "pads",
                            {1, 1, 1, 1});
  b.AddNode("Relu", {"c"}, {"r"});
  b.AddNode("GlobalAveragePool", {"r"}, {"g"});
  b.AddNode("Flatten", {"g"}, {"flat"});
  b.AddNode("Gemm", {"features", "fc.w", "fc.b"}, {"fc"});
  b.AddNode("Add", {"flat", "fc"}, {"sum"});
  b.AddNode("MatMul", {"features", "mm.w"}, {"mm"});
  b.AddNode("Mul", {"mm", "scale"}, {"scaled"});
  OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"scaled"}, {"probabilities"}), "axis", -1);
  b.AddInput("image", DType::kFloat32, {kAnyDim, 3, 6, 6});
  b.AddInput("features", DType::kFloat32, {kAnyDim, 5});
  b.AddOutput("sum", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("probabilities", DType::kFloat32, {kAnyDim, 3});
  return b.Serialize();
}

std::string MatMulChainOnnx(int layers, int64_t width) {
  OnnxModelBuilder b("matmul_chain", 13);
  std::string in = "x";
  const float scale = std::sqrt(6.0f / static_cast<float>(width));
  for (int i = 0; i < layers; ++i) {
    const std::string layer = "layer" + std::to_string(i);
    Tensor weight = RandomTensor({width, width}, 1000 + i);
    for (int64_t j = 0; j < weight.num_elements(); ++j) weight.data<float>()[j] *= scale;
    b.AddInitializer(layer + ".weight", weight);
    b.AddNode("MatMul", {in, layer + ".weight"}, {layer + ".matmul"});
    const std::string out = i + 1 == layers ? "y" : layer + ".relu";
    b.AddNode("Relu", {layer + ".matmul"}, {out});
    in = out;
  }
  b.AddInput("x", DType::kFloat32, {kAnyDim, width});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, width});
  return b.Serialize();
}

std::string ConvChainOnnx(const std::vector<Tensor>& weights, int64_t channels, int64_t wide,
                          int64_t side) {
  OnnxModelBuilder b("conv_chain", 17);
  b.AddInput("x", DType::kFloat32, {kAnyDim, channels, side, side});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, wide, 1, 1});
  const char* names[] = {"wa", "ba", "wb", "bb", "wc", "bc"};
  for (int i = 0; i < 6; ++i) b.AddInitializer(names[i], weights[i]);
  Tensor low = Tensor::Host(DType::kFloat32, {});
  low.data<float>()[0] = 0.0f;
  Tensor high = Tensor::Host(DType::kFloat32, {});
  high.data<float>()[0] = 6.0f;
  b.AddInitializer("low", low);
  b.AddInitializer("high", high);
  onnx::NodeProto* conv_a = b.AddNode("Conv", {"x", "wa", "ba"}, {"ca"});
  OnnxModelBuilder::SetInts(conv_a, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"ca"}, {"a"});
  onnx::NodeProto* conv_b = b.AddNode("Conv", {"a", "wb", "bb"}, {"cb"});
  OnnxModelBuilder::SetInts(conv_b, "pads", {1, 1, 1, 1});
  OnnxModelBuilder::SetInt(conv_b, "group", wide);
  b.AddNode("Clip", {"cb", "low", "high"}, {"b"});
  b.AddNode("Conv", {"b", "wc", "bc"}, {"cc"});
  b.AddNode("Add", {"cc", "a"}, {"d"});
  b.AddNode("GlobalAveragePool", {"d"}, {"y"});
  return b.Serialize();
}

std::string ConvPoolChainOnnx(const std::vector<Tensor>& weights, int64_t channels, int64_t wide,
                              int64_t side) {
  OnnxModelBuilder b("conv_pool_chain", 17);
  b.AddInput("x", DType::kFloat32, {kAnyDim, channels, side, side});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, wide, 1, 1});
  const char* names[] = {"wa", "ba", "wb", "bb", "wc", "bc"};
  for (int i = 0; i < 6; ++i) b.AddInitializer(names[i], weights[i]);
  onnx::NodeProto* conv_a = b.AddNode("Conv", {"x", "wa", "ba"}, {"ca"});
  OnnxModelBuilder::SetInts(conv_a, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"ca"}, {"a"});
  onnx::NodeProto* pool = b.AddNode("MaxPool", {"a"}, {"p"});
  OnnxModelBuilder::SetInts(pool, "kernel_shape", {3, 3});
  OnnxModelBuilder::SetInts(pool, "strides", {2, 2});
  OnnxModelBuilder::SetInts(pool, "pads", {1, 1, 1, 1});
  onnx::NodeProto* conv_b = b.AddNode("Conv", {"p", "wb", "bb"}, {"cb"});
  OnnxModelBuilder::SetInts(conv_b, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"cb"}, {"e"});
  b.AddNode("Conv", {"e", "wc", "bc"}, {"cc"});
  b.AddNode("Add", {"cc", "p"}, {"d"});
  b.AddNode("GlobalAveragePool", {"d"}, {"y"});
  return b.Serialize();
}

std::shared_ptr<const Model> LoadOrDie(const std::string& onnx_bytes, const std::string& name) {
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(onnx_bytes, name, name);
  if (!model.ok()) {
    ADD_FAILURE() << model.status();
    std::abort();
  }
  return *model;
}

std::string SequenceSumOnnx() {
  OnnxModelBuilder b("sequence_sum", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, kAnyDim});
  b.AddInput("mask", DType::kFloat32, {kAnyDim, kAnyDim});
  Tensor axis = Tensor::Host(DType::kInt64, {});
  axis.data<int64_t>()[0] = 1;
  Tensor axes = Tensor::Host(DType::kInt64, {1});
  axes.data<int64_t>()[0] = 1;
  b.AddInitializer("axis", axis);
  b.AddInitializer("axes", axes);
  b.AddNode("CumSum", {"x", "axis"}, {"running"});
  b.AddNode("Mul", {"x", "mask"}, {"kept"});
  OnnxModelBuilder::SetInt(b.AddNode("ReduceSum", {"kept", "axes"}, {"pooled"}), "keepdims", 0);
  b.AddOutput("running", DType::kFloat32, {kAnyDim, kAnyDim});
  b.AddOutput("pooled", DType::kFloat32, {kAnyDim});
  return b.Serialize();
}

std::string ScalarMeanOnnx() {
  OnnxModelBuilder builder("scalar_mean");
  OnnxModelBuilder::SetInt(builder.AddNode("ReduceMean", {"x"}, {"mean"}), "keepdims", 0);
  builder.AddNode("Relu", {"x"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  builder.AddOutput("mean", DType::kFloat32, {});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  return builder.Serialize();
}

namespace {

std::unique_ptr<Replica> CpuReplicaOrDie(std::shared_ptr<const Model> model,
                                         const SlotAssignment& slot) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      Replica::Create(std::move(model), slot, CreateCpuDevice(cpu, CpuSlotOptions{1}));
  if (!replica.ok()) {
    ADD_FAILURE() << replica.status();
    std::abort();
  }
  return *std::move(replica);
}

}  // namespace

std::unique_ptr<Replica> MakeCpuReplica(std::shared_ptr<const Model> model) {
  return CpuReplicaOrDie(std::move(model), SlotAssignment{"r0", EnumerateCpuDevices()[0].id, 1});
}

std::unique_ptr<ReplicaSet> MakeCpuReplicaSet(std::shared_ptr<const Model> model,
                                              const std::vector<double>& weights,
                                              SliceObserver* observer, int wide_threads) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<std::unique_ptr<Replica>> replicas;
  for (size_t i = 0; i < weights.size(); ++i) {
    replicas.push_back(
        CpuReplicaOrDie(model, SlotAssignment{"r" + std::to_string(i), cpu.id, weights[i]}));
  }
  std::unique_ptr<Replica> wide;
  if (wide_threads > 0) {
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(model, SlotAssignment{"wide", cpu.id, 1},
                        CreateCpuDevice(cpu, CpuSlotOptions{wide_threads}));
    if (!replica.ok()) {
      ADD_FAILURE() << replica.status();
      std::abort();
    }
    wide = *std::move(replica);
  }
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
      ReplicaSet::Create(model, std::move(replicas), ReplicaSet::Options{cpu.id, observer},
                         /*merge_stream=*/nullptr, std::move(wide));
  if (!set.ok()) {
    ADD_FAILURE() << set.status();
    std::abort();
  }
  return *std::move(set);
}

absl::StatusOr<void*> TensorSink::Allocate(int index, const TensorType& type) {
  if (outputs.size() <= static_cast<size_t>(index)) outputs.resize(index + 1);
  outputs[index] = Tensor::Host(type.dtype, type.shape);
  return outputs[index].raw_data();
}

PredictOutcome PredictAndWait(ReplicaSet& set, std::vector<Tensor> inputs) {
  PredictOutcome outcome;
  TensorSink sink;
  absl::Notification done;
  set.Predict(std::move(inputs), &sink, [&](absl::Status status, std::vector<BatchSlice> slices) {
    outcome.status = status;
    outcome.slices = std::move(slices);
    done.Notify();
  });
  done.WaitForNotification();
  outcome.outputs = std::move(sink.outputs);
  return outcome;
}

PredictOutcome RunAndWait(Servable& set, std::vector<Tensor> inputs, std::vector<BatchSlice> slices,
                          Servable::StillWanted still_wanted) {
  PredictOutcome outcome;
  TensorSink sink;
  absl::Notification done;
  set.Run(std::move(inputs), std::move(slices), &sink, std::move(still_wanted),
          [&](absl::Status status, std::vector<BatchSlice> ran) {
            outcome.status = status;
            outcome.slices = std::move(ran);
            done.Notify();
          });
  done.WaitForNotification();
  outcome.outputs = std::move(sink.outputs);
  return outcome;
}

double RelativeL2(const Tensor& a, const Tensor& b) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    diff += (x - y) * (x - y);
    ref += y * y;
  }
  return ref == 0 ? std::sqrt(diff) : std::sqrt(diff / ref);
}

}  // namespace replicad::testing
