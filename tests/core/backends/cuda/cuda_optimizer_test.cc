// The optimizer of a CUDA slot (device mode: one replicad.OptimizerStep kernel per
// parameter, state in GPU memory) against the host Optimizer, on the same random
// parameters and gradients, for every kind and variant. Parameters and State() must agree
// per element within |gpu - cpu| <= 1e-6 * |cpu| (kRelTolerance): both run the same
// per-element functions (core/ops/optimizer_step.h), and the device rounds every operation
// as the host does (no fused multiply-add), so we expect equality; the tolerance only
// allows a host build that fuses. Also: State()/Restore() on the device, and the op itself
// through the kernel runner with the update number from the run context.
// Skips without a GPU (CTest label gpu).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/device/run_context.h"
#include "core/ops/optimizer_step_attributes.h"
#include "core/ops/training_ops.h"
#include "core/train/optimizer.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_runner.h"

namespace replicad {
namespace {

constexpr double kRelTolerance = 1e-6;
const DeviceId kCpu{DeviceKind::kCpu, 0};
const DeviceId kGpu{DeviceKind::kCuda, 0};

// Several parameters, one of them empty, a few thousand elements in all.
const std::vector<int64_t> kSizes = {3000, 0, 1, 257, 1024};
constexpr int kSteps = 3;

using State = std::vector<std::pair<std::string, Tensor>>;
using Floats = std::vector<float>;

std::unique_ptr<Device> MakeDevice(const DeviceId& id) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return nullptr;
  const DeviceInfo* info = FindDevice(*devices, id);
  if (info == nullptr) return nullptr;
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(*info, SlotOptions{});
  return device.ok() ? *std::move(device) : nullptr;
}

Floats Random(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  Floats values(static_cast<size_t>(n));
  for (float& v : values) v = uniform(engine);
  return values;
}

std::vector<Floats> RandomSet(uint64_t seed, float scale) {
  std::vector<Floats> set;
  for (size_t i = 0; i < kSizes.size(); ++i)
    set.push_back(Random(kSizes[i], seed * 100 + i, scale));
  return set;
}

// Every element within the tolerance; one failure message for the first that is not.
void ExpectClose(const float* gpu, const float* cpu, size_t n, const std::string& what) {
  size_t bad = 0, first = 0, exact = 0;
  for (size_t j = 0; j < n; ++j) {
    if (gpu[j] == cpu[j]) ++exact;
    if (!(std::fabs(static_cast<double>(gpu[j]) - cpu[j]) <= kRelTolerance * std::fabs(cpu[j]))) {
      if (bad++ == 0) first = j;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements differ; first [" << first
                     << "] gpu " << gpu[first] << " cpu " << cpu[first];
  if (n != 0 && exact != n) std::cout << what << ": " << exact << " of " << n << " bitwise equal\n";
}

void ExpectSameState(const State& gpu, const State& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t k = 0; k < gpu.size(); ++k) {
    EXPECT_EQ(gpu[k].first, cpu[k].first) << what;
    ASSERT_EQ(gpu[k].second.type(), cpu[k].second.type()) << what << " " << cpu[k].first;
    ExpectClose(gpu[k].second.data<float>(), cpu[k].second.data<float>(),
                static_cast<size_t>(cpu[k].second.num_elements()), what + " " + cpu[k].first);
  }
}

State StateOf(const Optimizer& optimizer) {
  absl::StatusOr<State> state = optimizer.State();
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *std::move(state) : State{};
}

// Parameters (or gradients) in the GPU's memory, one buffer per non-empty parameter.
class DeviceSet {
 public:
  DeviceSet(Device& device, const std::vector<Floats>& host) : device_(device) {
    for (const Floats& values : host) {
      if (values.empty()) {
        buffers_.push_back(nullptr);
        continue;
      }
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = device.Allocate(values.size() * 4);
      EXPECT_TRUE(buffer.ok()) << buffer.status();
      if (!buffer.ok()) return;
      device.EnqueueCopy(values.data(), MemoryLocation{}, (*buffer)->data(),
                         device.memory_location(), values.size() * 4);
      buffers_.push_back(*std::move(buffer));
    }
    EXPECT_TRUE(device.Synchronize().ok());
  }

  std::vector<float*> pointers() const {
    std::vector<float*> result;
    for (const auto& b : buffers_) result.push_back(b ? static_cast<float*>(b->data()) : nullptr);
    return result;
  }
  std::vector<const float*> const_pointers() const {
    std::vector<const float*> result;
    for (float* p : pointers()) result.push_back(p);
    return result;
  }
  std::vector<Floats> Download() const {
    std::vector<Floats> host;
    for (const auto& b : buffers_) {
      host.emplace_back(b ? b->bytes() / 4 : 0);
      if (b) {
        device_.EnqueueCopy(b->data(), device_.memory_location(), host.back().data(),
                            MemoryLocation{}, b->bytes());
      }
    }
    EXPECT_TRUE(device_.Synchronize().ok());
    return host;
  }

 private:
  Device& device_;
  std::vector<std::shared_ptr<Buffer>> buffers_;
};

// Device mode's Step runs on the device's stream thread.
absl::Status StepOnStream(Device& device, Optimizer& optimizer, const DeviceSet& parameters,
                          const DeviceSet& gradients) {
  absl::Status status;
  device.Enqueue(
      [&] { status = optimizer.Step(parameters.pointers(), gradients.const_pointers()); });
  absl::Status synchronized = device.Synchronize();
  return status.ok() ? synchronized : status;
}

absl::Status StepOnHost(Optimizer& optimizer, std::vector<Floats>& parameters,
                        const std::vector<Floats>& gradients) {
  std::vector<float*> p;
  std::vector<const float*> g;
  for (size_t i = 0; i < parameters.size(); ++i) {
    p.push_back(parameters[i].empty() ? nullptr : parameters[i].data());
    g.push_back(gradients[i].empty() ? nullptr : gradients[i].data());
  }
  return optimizer.Step(p, g);
}

struct Case {
  std::string name;
  OptimizerConfig config;
};

std::vector<Case> Cases() {
  using Kind = OptimizerConfig::Kind;
  auto make = [](Kind kind, float lr, float momentum, bool nesterov, float weight_decay) {
    OptimizerConfig c;
    c.kind = kind;
    c.learning_rate = lr;
    c.momentum = momentum;
    c.nesterov = nesterov;
    c.weight_decay = weight_decay;
    return c;
  };
  OptimizerConfig adam_tuned = make(Kind::kAdam, 0.002f, 0, false, 0);
  adam_tuned.beta1 = 0.8f;
  adam_tuned.beta2 = 0.95f;
  adam_tuned.epsilon = 1e-6f;
  OptimizerConfig rmsprop_tuned = make(Kind::kRmsprop, 0.01f, 0, false, 0);
  rmsprop_tuned.alpha = 0.9f;
  rmsprop_tuned.epsilon = 1e-6f;
  return {
      {"sgd", make(Kind::kSgd, 0.1f, 0, false, 0)},
      {"sgd_momentum", make(Kind::kSgd, 0.05f, 0.9f, false, 0)},
      {"sgd_nesterov", make(Kind::kSgd, 0.05f, 0.9f, true, 0)},
      {"sgd_weight_decay", make(Kind::kSgd, 0.05f, 0, false, 0.01f)},
      {"sgd_momentum_weight_decay", make(Kind::kSgd, 0.05f, 0.5f, false, 0.01f)},
      {"adam", make(Kind::kAdam, 0.001f, 0, false, 0)},
      {"adam_weight_decay", make(Kind::kAdam, 0.01f, 0, false, 0.05f)},
      {"adam_tuned", adam_tuned},
      {"rmsprop", make(Kind::kRmsprop, 0.01f, 0, false, 0)},
      {"rmsprop_momentum", make(Kind::kRmsprop, 0.01f, 0.9f, false, 0.01f)},
      {"rmsprop_tuned", rmsprop_tuned},
  };
}

class CudaOptimizerTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    gpu_ = MakeDevice(kGpu);
    if (gpu_ == nullptr) GTEST_SKIP() << "no CUDA device";
  }

  std::unique_ptr<Optimizer> MakeGpuOptimizer() {
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
        Optimizer::Create(GetParam().config, kSizes, gpu_.get());
    EXPECT_TRUE(optimizer.ok()) << optimizer.status();
    if (!optimizer.ok()) return nullptr;
    EXPECT_EQ((*optimizer)->device(), gpu_.get());
    return *std::move(optimizer);
  }

  std::unique_ptr<Device> gpu_;
};

TEST_P(CudaOptimizerTest, ThreeStepsMatchTheHostOptimizer) {
  std::unique_ptr<Optimizer> host = *Optimizer::Create(GetParam().config, kSizes);
  std::unique_ptr<Optimizer> gpu = MakeGpuOptimizer();
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(StateOf(*gpu).empty());  // Nothing before the first step, as on the host.

  std::vector<Floats> host_params = RandomSet(1, 1.0f);
  DeviceSet gpu_params(*gpu_, host_params);
  for (int step = 1; step <= kSteps; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const std::vector<Floats> gradients = RandomSet(10 + step, 0.5f * step);
    ASSERT_TRUE(StepOnHost(*host, host_params, gradients).ok());
    DeviceSet gpu_gradients(*gpu_, gradients);
    absl::Status status = StepOnStream(*gpu_, *gpu, gpu_params, gpu_gradients);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(gpu->step(), step);
    const std::vector<Floats> got = gpu_params.Download();
    for (size_t i = 0; i < kSizes.size(); ++i) {
      ExpectClose(got[i].data(), host_params[i].data(), host_params[i].size(),
                  absl::StrCat(GetParam().name, " param", i));
    }
  }
  ExpectSameState(StateOf(*gpu), StateOf(*host), GetParam().name);
}

TEST_P(CudaOptimizerTest, StateAndRestoreRoundTripOnTheDevice) {
  std::unique_ptr<Optimizer> original = MakeGpuOptimizer();
  ASSERT_NE(original, nullptr);
  std::vector<Floats> params = RandomSet(2, 1.0f);
  DeviceSet original_params(*gpu_, params);
  for (int step = 1; step <= kSteps; ++step) {
    DeviceSet gradients(*gpu_, RandomSet(20 + step, 1.0f));
    ASSERT_TRUE(StepOnStream(*gpu_, *original, original_params, gradients).ok());
  }
  const State saved = StateOf(*original);
  ASSERT_EQ(saved.size(),
            kSizes.size() *
                OptimizerStateNames(GetParam().config.kind, GetParam().config.momentum).size());

  // Into a fresh device optimizer and a host one: the same state comes back out.
  std::unique_ptr<Optimizer> restored = MakeGpuOptimizer();
  ASSERT_NE(restored, nullptr);
  absl::Status status = restored->Restore(kSteps, saved);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(restored->step(), kSteps);
  const State round_trip = StateOf(*restored);
  ASSERT_EQ(round_trip.size(), saved.size());
  for (size_t k = 0; k < saved.size(); ++k) {
    EXPECT_EQ(round_trip[k].first, saved[k].first);
    EXPECT_EQ(std::memcmp(round_trip[k].second.raw_data(), saved[k].second.raw_data(),
                          saved[k].second.byte_size()),
              0)
        << saved[k].first;
  }
  std::unique_ptr<Optimizer> host = *Optimizer::Create(GetParam().config, kSizes);
  ASSERT_TRUE(host->Restore(kSteps, saved).ok());

  // Two more steps from the same parameters: the restored optimizer continues exactly
  // where the original is, and the host one within the tolerance.
  std::vector<Floats> host_params = original_params.Download();
  DeviceSet restored_params(*gpu_, host_params);
  for (int step = kSteps + 1; step <= kSteps + 2; ++step) {
    const std::vector<Floats> gradients = RandomSet(20 + step, 1.0f);
    DeviceSet gpu_gradients(*gpu_, gradients);
    ASSERT_TRUE(StepOnStream(*gpu_, *original, original_params, gpu_gradients).ok());
    ASSERT_TRUE(StepOnStream(*gpu_, *restored, restored_params, gpu_gradients).ok());
    ASSERT_TRUE(StepOnHost(*host, host_params, gradients).ok());
  }
  const std::vector<Floats> a = original_params.Download();
  const std::vector<Floats> b = restored_params.Download();
  for (size_t i = 0; i < kSizes.size(); ++i) {
    EXPECT_EQ(a[i], b[i]) << "param" << i;
    ExpectClose(b[i].data(), host_params[i].data(), host_params[i].size(),
                absl::StrCat("restored param", i));
  }

  // Back to step 0: nothing to copy, and the next step does not read the old state.
  ASSERT_TRUE(restored->Restore(0, {}).ok());
  EXPECT_TRUE(StateOf(*restored).empty());
}

// The update's dry run on the device (replicad.OptimizerDryRun, then host
// copies of the parameter that fails) finds what the host optimizer's dry
// run finds, before any state (t == 1) and after a step: nothing for finite
// updates, and the first element in parameter order whose update would not
// be finite, with its value before, its gradient and the value after.
TEST_P(CudaOptimizerTest, DeviceDryRunFindsWhatTheHostFinds) {
  std::unique_ptr<Optimizer> host = *Optimizer::Create(GetParam().config, kSizes);
  std::unique_ptr<Optimizer> gpu = MakeGpuOptimizer();
  ASSERT_NE(gpu, nullptr);
  std::vector<Floats> host_params = RandomSet(3, 1.0f);
  DeviceSet gpu_params(*gpu_, host_params);
  for (int step = 1; step <= 2; ++step) {
    SCOPED_TRACE(absl::StrCat("update ", step));
    std::vector<Floats> gradients = RandomSet(30 + step, 0.5f);
    auto pointers = [](std::vector<Floats>& set) {
      std::vector<float*> p;
      for (Floats& values : set) p.push_back(values.empty() ? nullptr : values.data());
      return p;
    };
    auto const_pointers = [](const std::vector<Floats>& set) {
      std::vector<const float*> p;
      for (const Floats& values : set) p.push_back(values.empty() ? nullptr : values.data());
      return p;
    };
    {
      DeviceSet gpu_gradients(*gpu_, gradients);
      absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> found =
          gpu->FindNonFiniteUpdate(gpu_params.pointers(), gpu_gradients.const_pointers());
      ASSERT_TRUE(found.ok()) << found.status();
      EXPECT_FALSE(found->has_value());
      EXPECT_FALSE(
          host->FirstNonFiniteUpdate(pointers(host_params), const_pointers(gradients)).has_value());
    }
    std::vector<Floats> bad = gradients;
    bad[3][100] = INFINITY;
    bad[4][7] = NAN;
    DeviceSet gpu_bad(*gpu_, bad);
    absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> found =
        gpu->FindNonFiniteUpdate(gpu_params.pointers(), gpu_bad.const_pointers());
    ASSERT_TRUE(found.ok()) << found.status();
    const std::optional<Optimizer::NonFiniteUpdate> want =
        host->FirstNonFiniteUpdate(pointers(host_params), const_pointers(bad));
    ASSERT_TRUE(want.has_value());
    ASSERT_TRUE(found->has_value());
    EXPECT_EQ((*found)->parameter, want->parameter);
    EXPECT_EQ((*found)->element, want->element);
    EXPECT_EQ((*found)->before, want->before);
    EXPECT_EQ(std::isnan((*found)->gradient), std::isnan(want->gradient));
    EXPECT_EQ(std::isnan((*found)->after), std::isnan(want->after));
    if (!std::isnan(want->after)) {
      EXPECT_EQ((*found)->after, want->after);
    }
    // Then a finite update on both, so the next round reads a state.
    ASSERT_TRUE(StepOnHost(*host, host_params, gradients).ok());
    DeviceSet gpu_gradients(*gpu_, gradients);
    ASSERT_TRUE(StepOnStream(*gpu_, *gpu, gpu_params, gpu_gradients).ok());
    host_params = gpu_params.Download();  // Both continue from the GPU's values.
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CudaOptimizerTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// More parameters than one multi-tensor launch takes (32), of sizes that
// span several blocks (4096 elements each) or none: every parameter updated
// as the host updates it, and the dry run's flag of a parameter in the third
// launch found.
TEST(CudaOptimizerMultiTensorTest, SeventyFiveParametersOverSeveralLaunches) {
  std::unique_ptr<Device> gpu = MakeDevice(kGpu);
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < 75; ++i) sizes.push_back(i % 10 == 3 ? 0 : (i * 977) % 9000 + 1);
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kAdam;
  config.learning_rate = 0.003f;
  config.weight_decay = 0.01f;
  std::unique_ptr<Optimizer> host = *Optimizer::Create(config, sizes);
  absl::StatusOr<std::unique_ptr<Optimizer>> on_gpu = Optimizer::Create(config, sizes, gpu.get());
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  auto random_set = [&sizes](uint64_t seed) {
    std::vector<Floats> set;
    for (size_t i = 0; i < sizes.size(); ++i) set.push_back(Random(sizes[i], seed + i, 1.0f));
    return set;
  };
  std::vector<Floats> host_params = random_set(1000);
  DeviceSet gpu_params(*gpu, host_params);
  for (int step = 1; step <= 2; ++step) {
    const std::vector<Floats> gradients = random_set(2000 * step);
    ASSERT_TRUE(StepOnHost(*host, host_params, gradients).ok());
    DeviceSet gpu_gradients(*gpu, gradients);
    ASSERT_TRUE(StepOnStream(*gpu, **on_gpu, gpu_params, gpu_gradients).ok());
  }
  const std::vector<Floats> got = gpu_params.Download();
  for (size_t i = 0; i < sizes.size(); ++i) {
    ExpectClose(got[i].data(), host_params[i].data(), host_params[i].size(),
                absl::StrCat("param", i));
  }
  ExpectSameState(StateOf(**on_gpu), StateOf(*host), "multi-tensor");

  std::vector<Floats> bad = random_set(5000);
  bad[70][sizes[70] - 1] = NAN;
  DeviceSet gpu_bad(*gpu, bad);
  absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> found =
      (*on_gpu)->FindNonFiniteUpdate(gpu_params.pointers(), gpu_bad.const_pointers());
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->parameter, 70u);
  EXPECT_EQ((*found)->element, sizes[70] - 1);
}

TEST(CudaOptimizerHostModeTest, AHostMemoryDeviceGivesAHostOptimizer) {
  std::unique_ptr<Device> cpu = MakeDevice(kCpu);
  ASSERT_NE(cpu, nullptr);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create({}, {4}, cpu.get());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  EXPECT_EQ((*optimizer)->device(), nullptr);
}

// The op on its own: the update number comes from the run context, and at t == 1 the
// state outputs are not read (here they hold NaN).
TEST(CudaOptimizerStepOpTest, ReadsTheUpdateNumberFromTheStepContext) {
  std::unique_ptr<Device> gpu = MakeDevice(kGpu);
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kAdam;
  config.learning_rate = 0.01f;
  config.weight_decay = 0.1f;
  const int64_t n = 777;
  const std::vector<int64_t> sizes = {n};
  auto tensor = [n](const Floats& values) {
    Tensor t = Tensor::Host(DType::kFloat32, {n});
    std::copy(values.begin(), values.end(), t.data<float>());
    return t;
  };

  std::vector<Floats> host_params = {Random(n, 1, 1.0f)};
  std::unique_ptr<Optimizer> host = *Optimizer::Create(config, sizes);
  testing::KernelCall call;
  call.op_type = std::string(kOptimizerStep);
  call.attributes = OptimizerStepAttributes(config);
  for (int64_t t : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("t = ", t));
    const Floats gradient = Random(n, 100 + t, 1.0f);
    std::vector<Tensor> initial = {tensor(host_params[0])};
    if (t == 1) {
      initial.push_back(tensor(Floats(n, NAN)));
      initial.push_back(tensor(Floats(n, NAN)));
    } else {
      for (auto& [name, value] : StateOf(*host)) initial.push_back(value);
    }
    ASSERT_TRUE(StepOnHost(*host, host_params, {gradient}).ok());
    call.inputs = {tensor(gradient)};
    call.context.step = t;
    absl::StatusOr<std::vector<Tensor>> outputs = testing::RunKernelInPlace(*gpu, call, initial);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ASSERT_EQ(outputs->size(), 3u);
    ExpectClose((*outputs)[0].data<float>(), host_params[0].data(), n, "P");
    const State state = StateOf(*host);
    for (size_t k = 0; k < state.size(); ++k) {
      ExpectClose((*outputs)[1 + k].data<float>(), state[k].second.data<float>(), n,
                  state[k].first);
    }
  }

  call.context = RunContext{};  // step 0: no update number.
  absl::StatusOr<std::vector<Tensor>> rejected = testing::RunKernelInPlace(
      *gpu, call, {tensor(host_params[0]), tensor(Floats(n)), tensor(Floats(n))});
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument) << rejected.status();
}

TEST(OptimizerStepShapeRuleTest, OutputsAreGsTypeOncePerStateTensor) {
  KernelSpec spec;
  spec.op_type = std::string(kOptimizerStep);
  spec.inputs = {TensorType{DType::kFloat32, {2, 3}}};
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kRmsprop;
  config.momentum = 0.5f;
  Attributes attributes = OptimizerStepAttributes(config);
  spec.attributes = &attributes;
  ASSERT_TRUE(InferOptimizerStep(&spec).ok());
  EXPECT_EQ(spec.outputs, std::vector<TensorType>(3, TensorType{DType::kFloat32, {2, 3}}));

  attributes.Set("kind", std::string("adagrad"));
  absl::Status status = InferOptimizerStep(&spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      status.message().find("attribute kind must be sgd, adam or rmsprop; received 'adagrad'"),
      std::string::npos)
      << status;
  attributes = OptimizerStepAttributes(config);
  attributes.Set("learning_rate", -1.0f);
  status = InferOptimizerStep(&spec);
  EXPECT_NE(status.message().find("attribute learning_rate must be > 0 and <= 10000; received -1"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace replicad
