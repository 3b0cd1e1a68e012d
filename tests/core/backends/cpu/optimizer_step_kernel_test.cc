// The CPU backend's replicad.OptimizerStep kernel (what an optimizer on a
// device whose kernels are the CPU's runs: the device-memory stand-ins)
// against the host Optimizer, for every kind and variant over three
// updates: parameters and state bit for bit equal (both run
// UpdateParameterOnHost). The update number comes from the run context; at
// t == 1 the state outputs are not read (here they hold NaN); t < 1 is
// refused naming the node. Several parameters in one node (the multi-tensor
// form) update each as a node of its own would; the dry run flags each.

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/device/run_context.h"
#include "core/ops/optimizer_step_attributes.h"
#include "core/ops/training_ops.h"
#include "core/train/optimizer.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_runner.h"

namespace replicad {
namespace {

constexpr int64_t kElements = 513;

Tensor RandomVector(uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Tensor t = Tensor::Host(DType::kFloat32, {kElements});
  for (int64_t i = 0; i < kElements; ++i) t.data<float>()[i] = uniform(engine);
  return t;
}

Tensor Filled(float value) {
  Tensor t = Tensor::Host(DType::kFloat32, {kElements});
  for (int64_t i = 0; i < kElements; ++i) t.data<float>()[i] = value;
  return t;
}

void ExpectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.byte_size(), want.byte_size()) << what;
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.byte_size()), 0) << what;
}

std::vector<OptimizerConfig> Configs() {
  using Kind = OptimizerConfig::Kind;
  std::vector<OptimizerConfig> configs(6);
  configs[0].kind = Kind::kSgd;
  configs[1].kind = Kind::kSgd;
  configs[1].momentum = 0.9f;
  configs[1].nesterov = true;
  configs[1].weight_decay = 0.01f;
  configs[2].kind = Kind::kAdam;
  configs[2].learning_rate = 0.002f;
  configs[3].kind = Kind::kAdam;
  configs[3].weight_decay = 0.05f;
  configs[3].beta1 = 0.8f;
  configs[4].kind = Kind::kRmsprop;
  configs[5].kind = Kind::kRmsprop;
  configs[5].momentum = 0.5f;
  configs[5].alpha = 0.9f;
  return configs;
}

TEST(CpuOptimizerStepKernelTest, UpdatesLikeTheHostOptimizerBitForBit) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Device> device = CreateCpuDevice(cpu, {1});
  for (const OptimizerConfig& config : Configs()) {
    const std::string what = absl::StrCat(OptimizerKindName(config.kind), " momentum ",
                                          config.momentum, " weight_decay ", config.weight_decay);
    std::unique_ptr<Optimizer> host = *Optimizer::Create(config, {kElements});
    Tensor parameter = RandomVector(1);
    Tensor host_parameter = RandomVector(1);  // Its own copy (a Tensor shares its buffer).
    const size_t states = OptimizerStateNames(config.kind, config.momentum).size();
    std::vector<Tensor> state(states, Filled(NAN));  // Not read at t == 1.
    testing::KernelCall call;
    call.op_type = std::string(kOptimizerStep);
    call.attributes = OptimizerStepAttributes(config);
    for (int64_t t = 1; t <= 3; ++t) {
      const Tensor gradient = RandomVector(100 + t);
      ASSERT_TRUE(host->Step({host_parameter.data<float>()}, {gradient.data<float>()}).ok());
      call.context.step = t;
      call.inputs = {gradient};
      std::vector<Tensor> initial = {parameter};
      for (const Tensor& s : state) initial.push_back(s);
      absl::StatusOr<std::vector<Tensor>> outputs =
          testing::RunKernelInPlace(*device, call, initial);
      ASSERT_TRUE(outputs.ok()) << what << ": " << outputs.status();
      ASSERT_EQ(outputs->size(), 1 + states) << what;
      parameter = (*outputs)[0];
      ExpectSameBits(parameter, host_parameter, absl::StrCat(what, ", t ", t, ", P"));
      absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> want = host->State();
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(want->size(), states);
      for (size_t k = 0; k < states; ++k) {
        state[k] = (*outputs)[1 + k];
        ExpectSameBits(state[k], (*want)[k].second,
                       absl::StrCat(what, ", t ", t, ", ", (*want)[k].first));
      }
    }
    call.context = RunContext{};  // No update number.
    std::vector<Tensor> initial = {parameter};
    for (const Tensor& s : state) initial.push_back(s);
    absl::StatusOr<std::vector<Tensor>> refused = testing::RunKernelInPlace(*device, call, initial);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find("the update number"), std::string::npos)
        << refused.status();
  }
}

// Random values of `n` elements.
Tensor RandomOf(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  Tensor t = Tensor::Host(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = uniform(engine);
  return t;
}

TEST(CpuOptimizerStepKernelTest, SeveralParametersInOneNodeUpdateLikeTheHostOptimizer) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Device> device = CreateCpuDevice(cpu, {1});
  const std::vector<int64_t> sizes = {513, 1, 4099};
  for (const OptimizerConfig& config : Configs()) {
    const std::string what = absl::StrCat(OptimizerKindName(config.kind), " momentum ",
                                          config.momentum, " weight_decay ", config.weight_decay);
    std::unique_ptr<Optimizer> host = *Optimizer::Create(config, sizes);
    const size_t states = OptimizerStateNames(config.kind, config.momentum).size();
    std::vector<Tensor> host_parameters;
    // The node's in-place outputs: P_j, then its state, for each j.
    std::vector<Tensor> outputs;
    for (size_t j = 0; j < sizes.size(); ++j) {
      host_parameters.push_back(RandomOf(sizes[j], j, 1.0f));
      outputs.push_back(RandomOf(sizes[j], j, 1.0f));
      for (size_t k = 0; k < states; ++k) {
        Tensor unread = Tensor::Host(DType::kFloat32, {sizes[j]});
        for (int64_t i = 0; i < sizes[j]; ++i) unread.data<float>()[i] = NAN;  // t == 1.
        outputs.push_back(unread);
      }
    }
    testing::KernelCall call;
    call.op_type = std::string(kOptimizerStep);
    call.attributes = OptimizerStepAttributes(config);
    for (int64_t t = 1; t <= 3; ++t) {
      call.inputs.clear();
      std::vector<const float*> gradients;
      std::vector<float*> parameters;
      for (size_t j = 0; j < sizes.size(); ++j) {
        call.inputs.push_back(RandomOf(sizes[j], 100 * t + j, 0.5f));
        gradients.push_back(call.inputs.back()->data<float>());
        parameters.push_back(host_parameters[j].data<float>());
      }
      ASSERT_TRUE(host->Step(parameters, gradients).ok());
      call.context.step = t;
      absl::StatusOr<std::vector<Tensor>> updated =
          testing::RunKernelInPlace(*device, call, outputs);
      ASSERT_TRUE(updated.ok()) << what << ": " << updated.status();
      ASSERT_EQ(updated->size(), sizes.size() * (1 + states)) << what;
      outputs = *updated;
      absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> want = host->State();
      ASSERT_TRUE(want.ok()) << want.status();
      for (size_t j = 0; j < sizes.size(); ++j) {
        const size_t first = j * (1 + states);
        ExpectSameBits(outputs[first], host_parameters[j], absl::StrCat(what, ", t ", t, ", P", j));
        for (size_t k = 0; k < states; ++k) {
          const auto& [name, value] = (*want)[j * states + k];
          ExpectSameBits(outputs[first + 1 + k], value, absl::StrCat(what, ", t ", t, ", ", name));
        }
      }
    }
  }
}

TEST(CpuOptimizerDryRunKernelTest, FlagsEachParameterWhoseUpdateWouldNotBeFinite) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Device> device = CreateCpuDevice(cpu, {1});
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kSgd;
  config.learning_rate = 1e4f;
  testing::KernelCall call;
  call.op_type = std::string(kOptimizerDryRun);
  call.attributes = OptimizerStepAttributes(config);
  call.context.step = 1;
  // G_j, P_j for three parameters; the second's update overflows (1e4 * 1e36).
  Tensor overflowing = Filled(0.5f);
  overflowing.data<float>()[7] = 1e36f;
  call.inputs = {Filled(0.5f), Filled(1.0f),  overflowing,
                 Filled(1.0f), Filled(-0.5f), Filled(1.0f)};
  absl::StatusOr<std::vector<Tensor>> flags = testing::RunKernel(*device, call);
  ASSERT_TRUE(flags.ok()) << flags.status();
  ASSERT_EQ(flags->size(), 3u);
  EXPECT_EQ(*(*flags)[0].data<float>(), 1.0f);
  EXPECT_EQ(*(*flags)[1].data<float>(), 0.0f);
  EXPECT_EQ(*(*flags)[2].data<float>(), 1.0f);
}

TEST(OptimizerShapeRulesTest, SeveralParametersTakeTheirOwnTypesAndCountsAreChecked) {
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kAdam;
  Attributes attributes = OptimizerStepAttributes(config);
  KernelSpec step;
  step.op_type = std::string(kOptimizerStep);
  step.attributes = &attributes;
  const TensorType a{DType::kFloat32, {2, 3}};
  const TensorType b{DType::kFloat32, {5}};
  step.inputs = {a, b};
  ASSERT_TRUE(InferOptimizerStep(&step).ok());
  EXPECT_EQ(step.outputs, (std::vector<TensorType>{a, a, a, b, b, b}));
  step.inputs.clear();
  absl::Status status = InferOptimizerStep(&step);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("takes at least 1 input"), std::string::npos) << status;

  KernelSpec dry_run;
  dry_run.op_type = std::string(kOptimizerDryRun);
  dry_run.attributes = &attributes;
  dry_run.inputs = {a, a, a, a, b, b, b, b};  // Adam: G, P, exp_avg, exp_avg_sq each.
  ASSERT_TRUE(InferOptimizerDryRun(&dry_run).ok());
  EXPECT_EQ(dry_run.outputs, std::vector<TensorType>(2, TensorType{DType::kFloat32, {}}));
  dry_run.inputs = {a, a, a, a, b, b, b};
  status = InferOptimizerDryRun(&dry_run);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("takes 4 inputs per parameter (G, P and the state of adam), "
                                  "received 7"),
            std::string::npos)
      << status;
  dry_run.inputs = {a, a, a, a, b, b, a, b};
  status = InferOptimizerDryRun(&dry_run);
  EXPECT_NE(status.message().find("input 6 must be float32[5] like its G (input 4), received "
                                  "float32[2,3]"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace replicad
