// The CPU backend's replicad.OptimizerStep kernel (what an optimizer on a
// device whose kernels are the CPU's runs: the device-memory stand-ins)
// against the host Optimizer, for every kind and variant over three
// updates: parameters and state bit for bit equal (both run
// UpdateParameterOnHost). The update number comes from the run context; at
// t == 1 the state outputs are not read (here they hold NaN); t < 1 is
// refused naming the node.

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

}  // namespace
}  // namespace replicad
