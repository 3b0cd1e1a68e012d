// Chains of 16-bit convolutions on CUDA slots (cudnn_conv16_kernel.cc): a
// model served with --precision fp16 or bf16 whose convolutions feed one
// another (through a MaxPool too, as resnet's stem) hands the values over
// in 16 bits. The chain (conv, ReLU, grouped
// conv, clamp, 1x1 conv with the first's output as a fused residual, global
// average pool) on one GPU slot against the same float32 model on a CPU
// slot: relative L2 <= 5e-3 for fp16 (10-bit mantissas, float32 sums) and
// <= 3e-2 for bf16 (7-bit), and above 1e-6 (16-bit values ran: float32
// differs in summation order only). A marked convolution made with a
// native output reports the 16-bit layout and its bytes, and so does a
// MaxPool handed 16-bit values; a float32 convolution or an AveragePool
// handed a 16-bit input is refused naming the node. Skips
// without a GPU (CTest label gpu).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backends/backends.h"
#include "core/backends/cuda/kernels/cudnn_convolution.h"
#include "core/model/compute_precision.h"
#include "core/model/onnx_import.h"
#include "core/ops/op_registry.h"
#include "core/serve/replica_set.h"
#include "gtest/gtest.h"
#include "tests/testing/local_gpus.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr int64_t kChannels = 8, kWide = 16, kSide = 12;

std::string ChainOnnx() {
  return testing::ConvChainOnnx(
      {testing::RandomTensor({kWide, kChannels, 3, 3}, 11), testing::RandomTensor({kWide}, 12),
       testing::RandomTensor({kWide, 1, 3, 3}, 13), testing::RandomTensor({kWide}, 14),
       testing::RandomTensor({kWide, kWide, 1, 1}, 15), testing::RandomTensor({kWide}, 16)},
      kChannels, kWide, kSide);
}

// resnet's stem in small: a MaxPool between two convolutions of the chain.
std::string PoolChainOnnx() {
  return testing::ConvPoolChainOnnx(
      {testing::RandomTensor({kWide, kChannels, 3, 3}, 31), testing::RandomTensor({kWide}, 32),
       testing::RandomTensor({kWide, kWide, 3, 3}, 33), testing::RandomTensor({kWide}, 34),
       testing::RandomTensor({kWide, kWide, 1, 1}, 35), testing::RandomTensor({kWide}, 36)},
      kChannels, kWide, kSide);
}

std::shared_ptr<const Model> Load(ComputePrecision precision, const std::string& onnx = "") {
  OnnxImportOptions options;
  options.precision = precision;
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxBytes(onnx.empty() ? ChainOnnx() : onnx, "chain", "chain", options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// The model on one slot of `gpu`.
std::unique_ptr<ReplicaSet> GpuSet(const DeviceInfo& gpu, std::shared_ptr<const Model> model) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(gpu, SlotOptions{});
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      Replica::Create(model, SlotAssignment{"g0", gpu.id, 1}, *std::move(device));
  EXPECT_TRUE(replica.ok()) << replica.status();
  if (!replica.ok()) return nullptr;
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(*std::move(replica));
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
      ReplicaSet::Create(model, std::move(replicas), ReplicaSet::Options{}, nullptr);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *std::move(set) : nullptr;
}

// The chain (and, with `onnx`, another network) on a GPU slot in fp16 and
// bf16 against float32 on a CPU slot.
void ExpectSixteenBitsMatchFloat32(const std::string& onnx) {
  const std::vector<DeviceInfo> gpus = testing::LocalGpus();
  if (gpus.empty()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<ReplicaSet> cpu =
      testing::MakeCpuReplicaSet(Load(ComputePrecision::kFloat32, onnx), {1});
  for (int64_t batch : {1, 5}) {
    const std::vector<Tensor> x = {testing::RandomTensor({batch, kChannels, kSide, kSide}, 17)};
    testing::PredictOutcome expected = testing::PredictAndWait(*cpu, x);
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    for (ComputePrecision precision : {ComputePrecision::kFloat16, ComputePrecision::kBFloat16}) {
      SCOPED_TRACE(std::string(ComputePrecisionName(precision)) + ", batch " +
                   std::to_string(batch));
      std::unique_ptr<ReplicaSet> gpu = GpuSet(gpus[0], Load(precision, onnx));
      ASSERT_NE(gpu, nullptr);
      testing::PredictOutcome actual = testing::PredictAndWait(*gpu, x);
      ASSERT_TRUE(actual.status.ok()) << actual.status;
      const double difference = testing::RelativeL2(actual.outputs[0], expected.outputs[0]);
      EXPECT_LE(difference, precision == ComputePrecision::kFloat16 ? 5e-3 : 3e-2);
      EXPECT_GT(difference, 1e-6) << "the chain computed float32";
    }
  }
}

TEST(CudaConv16Test, ChainsInSixteenBitsMatchFloat32WithinTheirMantissas) {
  ExpectSixteenBitsMatchFloat32("");
}

// A MaxPool between two of the chain's convolutions pools their 16-bit
// values as they are (cudnn_pool_kernel.cc) and hands them on in 16 bits.
TEST(CudaConv16Test, AMaxPoolInTheChainPoolsSixteenBitValues) {
  ExpectSixteenBitsMatchFloat32(PoolChainOnnx());
}

// A Conv spec of [2, 8, 12, 12] by [16, 8, 3, 3] (pads 1) with constant
// weights, marked `precision` and, when `writes`, to write 16 bits.
struct ConvSpec {
  Attributes attributes;
  Tensor weights = testing::RandomTensor({kWide, kChannels, 3, 3}, 21);
  KernelSpec spec;

  ConvSpec(const std::string& precision, bool writes) {
    attributes.Set("pads", AttributeValue(std::vector<int64_t>{1, 1, 1, 1}));
    if (!precision.empty()) attributes.Set(kPrecisionAttribute, AttributeValue(precision));
    if (writes) attributes.Set(kOutputPrecisionAttribute, AttributeValue(precision));
    spec.op_type = "Conv";
    spec.node_name = "chained";
    spec.attributes = &attributes;
    spec.inputs = {TensorType{DType::kFloat32, {2, kChannels, kSide, kSide}}, weights.type()};
    spec.constant_inputs = {nullptr, &weights};
    spec.native_output = writes;
    EXPECT_TRUE(FindOp("Conv")->infer(&spec).ok());
  }
};

TEST(CudaConv16Test, MarkedConvolutionsReportTheirLayoutAndOthersRefuseIt) {
  const std::vector<DeviceInfo> gpus = testing::LocalGpus();
  if (gpus.empty()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Device>> gpu = CreateDevice(gpus[0], SlotOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t output_elements = 2 * kWide * kSide * kSide;
  for (const auto& [precision, layout] :
       {std::pair{"fp16", kCudaFloat16Layout}, std::pair{"bf16", kCudaBFloat16Layout}}) {
    SCOPED_TRACE(precision);
    ConvSpec writing(precision, /*writes=*/true);
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = (*gpu)->MakeKernel(writing.spec);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_EQ((*kernel)->native_output_layout(), layout);
    EXPECT_EQ((*kernel)->native_output_bytes(), output_elements * 2);
    // Not kept native by the plan: float32 out.
    ConvSpec plain(precision, /*writes=*/false);
    kernel = (*gpu)->MakeKernel(plain.spec);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_EQ((*kernel)->native_output_layout(), "");
  }
  // A MaxPool handed 16-bit values writes them so where the plan keeps its
  // output native; an AveragePool is not handed them (Internal, naming it).
  Attributes window;
  window.Set("kernel_shape", AttributeValue(std::vector<int64_t>{3, 3}));
  window.Set("strides", AttributeValue(std::vector<int64_t>{2, 2}));
  window.Set("pads", AttributeValue(std::vector<int64_t>{1, 1, 1, 1}));
  for (const char* op : {"MaxPool", "AveragePool"}) {
    KernelSpec pool;
    pool.op_type = op;
    pool.node_name = "pooled";
    pool.attributes = &window;
    pool.inputs = {TensorType{DType::kFloat32, {2, kWide, kSide, kSide}}};
    pool.constant_inputs = {nullptr};
    pool.input_layouts = {kCudaBFloat16Layout};
    pool.native_output = true;
    window.Set(kOutputPrecisionAttribute, AttributeValue(std::string("bf16")));
    ASSERT_TRUE(FindOp(op)->infer(&pool).ok());
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = (*gpu)->MakeKernel(pool);
    if (std::string(op) == "MaxPool") {
      ASSERT_TRUE(kernel.ok()) << kernel.status();
      EXPECT_EQ((*kernel)->native_output_layout(), kCudaBFloat16Layout);
      EXPECT_EQ((*kernel)->native_output_bytes(), 2 * kWide * (kSide / 2) * (kSide / 2) * 2);
    } else {
      EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInternal) << kernel.status();
      EXPECT_NE(kernel.status().message().find("pooled"), std::string::npos);
    }
  }
  ConvSpec float32("", /*writes=*/false);
  float32.spec.input_layouts = {kCudaFloat16Layout, "", ""};
  absl::StatusOr<std::unique_ptr<Kernel>> refused = (*gpu)->MakeKernel(float32.spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal) << refused.status();
  EXPECT_NE(refused.status().message().find("chained"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace replicad
