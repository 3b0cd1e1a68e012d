// replicad.BatchNormTrain and replicad.BatchNormGrad on CUDA against the CPU
// kernels, alone and with a step collective (SyncBatchNorm). Both sum in
// double and differ only in summation order, so every float output agrees to
// |cuda - cpu| <= 1e-4 * (1 + |cpu|) (kTolerance); a slot synchronized with
// another slot's sums agrees with one slot running the whole batch to the
// same bound. Skips without a GPU (CTest label gpu).

#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/device/run_context.h"
#include "core/ops/training_ops.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::KernelCall;
using testing::RunKernel;

constexpr double kTolerance = 1e-4;

// Stands in for the other slots of a step. Without `other` it doubles every
// value, as a second slot with identical rows would; with it, it adds
// `other` (another slot's sums and count). Records the count of every call,
// so the test can check that both backends make the same calls.
class FakeCollective : public StepCollective {
 public:
  FakeCollective() = default;
  explicit FakeCollective(std::vector<double> other) : other_(std::move(other)) {}

  void AllReduceSum(int participant, double* data, size_t count) override {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(count);
    for (size_t i = 0; i < count; ++i) {
      if (other_.empty()) {
        data[i] *= 2;
      } else if (i < other_.size()) {
        data[i] += other_[i];
      }
    }
  }
  void Abort() override {}

  std::vector<size_t> TakeCalls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(calls_, {});
  }

 private:
  std::vector<double> other_;
  std::mutex mutex_;
  std::vector<size_t> calls_;
};

// [batch, channels, spatial], as both kernels view X.
struct Planes {
  int64_t batch, channels, spatial;
};

Planes PlanesOf(const Shape& x) {
  Planes p{x[0], x.size() > 1 ? x[1] : 1, 1};
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  return p;
}

Tensor Random(Shape shape, uint64_t seed, float offset = 0.0f, float gain = 1.0f) {
  Tensor t = testing::RandomTensor(std::move(shape), seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.data<float>()[i] = offset + gain * t.data<float>()[i];
  }
  return t;
}

Tensor Variances(int64_t channels, uint64_t seed) {
  Tensor t = testing::RandomTensor({channels}, seed);
  for (int64_t i = 0; i < channels; ++i) t.data<float>()[i] = 0.1f + std::fabs(t.data<float>()[i]);
  return t;
}

KernelCall TrainCall(const Tensor& x, float epsilon, float momentum, uint64_t seed) {
  const int64_t c = PlanesOf(x.shape()).channels;
  KernelCall call;
  call.op_type = std::string(kBatchNormTrain);
  call.attributes.Set("epsilon", epsilon);
  call.attributes.Set("momentum", momentum);
  call.inputs = {x, Random({c}, seed + 1, 1.0f, 0.5f), Random({c}, seed + 2), Random({c}, seed + 3),
                 Variances(c, seed + 4)};
  return call;
}

KernelCall GradCall(const Tensor& x, const Tensor& scale, const Tensor& saved_mean,
                    const Tensor& saved_invstd, const Tensor& dy) {
  KernelCall call;
  call.op_type = std::string(kBatchNormGrad);
  call.inputs = {x, scale, saved_mean, saved_invstd, dy};
  return call;
}

void ExpectNear(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(TensorTypeToString(actual.type()), TensorTypeToString(expected.type())) << what;
  int reported = 0;
  for (int64_t i = 0; i < expected.num_elements() && reported < 5; ++i) {
    const double a = actual.data<float>()[i];
    const double e = expected.data<float>()[i];
    if (std::isnan(a) && std::isnan(e)) continue;
    if (!(std::fabs(a - e) <= kTolerance * (1 + std::fabs(e)))) {
      ADD_FAILURE() << what << ", element " << i << ": " << a << " vs " << e;
      ++reported;
    }
  }
}

void ExpectAllNear(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected,
                   const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t o = 0; o < expected.size(); ++o) {
    ExpectNear(actual[o], expected[o], absl::StrCat(what, ", output ", o));
  }
}

class CudaBatchNormTrainTest : public testing::CpuAndGpuTest {
 protected:
  // Runs `call` on both devices, expects them to agree and returns the CPU's.
  std::vector<Tensor> ExpectSameOnGpu(const KernelCall& call, const std::string& what) {
    absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, call);
    EXPECT_TRUE(cpu.ok()) << what << ": " << cpu.status();
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
    EXPECT_TRUE(gpu.ok()) << what << ": " << gpu.status();
    if (!cpu.ok() || !gpu.ok()) return {};
    ExpectAllNear(*gpu, *cpu, what);
    return *std::move(cpu);
  }
};

const std::vector<Shape>& TestShapes() {
  // The last two split each channel's sums over several blocks (9 and 8
  // parts; the second's parts start within a row and end unevenly).
  static const std::vector<Shape> shapes = {{64, 32},       {1, 7},          {33},
                                            {4, 3, 5},      {8, 16, 12, 12}, {2, 6, 7, 7},
                                            {4, 8, 96, 96}, {3, 2, 111, 97}};
  return shapes;
}

TEST_F(CudaBatchNormTrainTest, TrainMatchesCpu) {
  const std::pair<float, float> settings[] = {{1e-5f, 0.9f}, {1e-3f, 0.1f}, {0.5f, 0.0f}};
  uint64_t seed = 1;
  for (const Shape& shape : TestShapes()) {
    for (const auto& [epsilon, momentum] : settings) {
      // An offset mean: the variance is a difference of large sums.
      const Tensor x = Random(shape, seed, 3.0f, 2.0f);
      ExpectSameOnGpu(TrainCall(x, epsilon, momentum, seed += 10),
                      absl::StrCat("BatchNormTrain ", TensorTypeToString(x.type()), " epsilon ",
                                   epsilon, " momentum ", momentum));
    }
  }
}

TEST_F(CudaBatchNormTrainTest, TrainWithConstantChannel) {
  // Channel 1 is constant: variance 0 (or a rounding error below, clamped).
  Tensor x = Random({16, 3, 4, 4}, 5);
  for (int64_t n = 0; n < 16; ++n) {
    for (int64_t s = 0; s < 16; ++s) x.data<float>()[(n * 3 + 1) * 16 + s] = 0.7f;
  }
  ExpectSameOnGpu(TrainCall(x, 1e-5f, 0.9f, 6), "BatchNormTrain, a constant channel");
}

TEST_F(CudaBatchNormTrainTest, GradMatchesCpu) {
  uint64_t seed = 100;
  for (const Shape& shape : TestShapes()) {
    const Tensor x = Random(shape, seed, -1.0f, 1.5f);
    const KernelCall train = TrainCall(x, 1e-5f, 0.9f, seed += 10);
    absl::StatusOr<std::vector<Tensor>> forward = RunKernel(*cpu_, train);
    ASSERT_TRUE(forward.ok()) << forward.status();
    const Tensor dy = Random(shape, seed += 10);
    ExpectSameOnGpu(GradCall(x, *train.inputs[1], (*forward)[1], (*forward)[2], dy),
                    absl::StrCat("BatchNormGrad ", TensorTypeToString(x.type())));
  }
}

// The doubling collective: both backends give it the same calls and agree.
TEST_F(CudaBatchNormTrainTest, SameCallsAndResultsUnderACollective) {
  FakeCollective collective;
  RunContext step;
  step.global_rows = 16;
  step.collective = &collective;
  for (const Shape& shape : {Shape{8, 12}, Shape{8, 5, 6, 6}}) {
    const int64_t c = PlanesOf(shape).channels;
    const size_t packed = static_cast<size_t>(2 * c + 1);
    const Tensor x = Random(shape, 7, 0.5f);
    KernelCall train = TrainCall(x, 1e-5f, 0.9f, 8);
    train.context = step;
    const std::vector<Tensor> forward =
        ExpectSameOnGpu(train, absl::StrCat("BatchNormTrain, doubled, ", c, " channels"));
    EXPECT_EQ(collective.TakeCalls(), (std::vector<size_t>{packed, packed}));
    ASSERT_EQ(forward.size(), 5u);

    KernelCall grad = GradCall(x, *train.inputs[1], forward[1], forward[2], Random(shape, 9));
    grad.context = step;
    ExpectSameOnGpu(grad, absl::StrCat("BatchNormGrad, doubled, ", c, " channels"));
    EXPECT_EQ(collective.TakeCalls(), (std::vector<size_t>{packed, packed}));
  }
}

// Per channel over rows [begin, end) of x: sum and sum of squares of x.
std::vector<double> TrainSums(const Tensor& x, int64_t begin, int64_t end) {
  const Planes p = PlanesOf(x.shape());
  std::vector<double> sums(2 * p.channels + 1, 0.0);
  for (int64_t n = begin; n < end; ++n) {
    for (int64_t c = 0; c < p.channels; ++c) {
      for (int64_t s = 0; s < p.spatial; ++s) {
        const double v = x.data<float>()[(n * p.channels + c) * p.spatial + s];
        sums[c] += v;
        sums[p.channels + c] += v * v;
      }
    }
  }
  sums[2 * p.channels] = static_cast<double>((end - begin) * p.spatial);
  return sums;
}

// Per channel over rows [begin, end): sum of dy and of dy * xhat.
std::vector<double> GradSums(const Tensor& x, const Tensor& dy, const Tensor& mean,
                             const Tensor& invstd, int64_t begin, int64_t end) {
  const Planes p = PlanesOf(x.shape());
  std::vector<double> sums(2 * p.channels + 1, 0.0);
  for (int64_t n = begin; n < end; ++n) {
    for (int64_t c = 0; c < p.channels; ++c) {
      for (int64_t s = 0; s < p.spatial; ++s) {
        const int64_t i = (n * p.channels + c) * p.spatial + s;
        const double g = dy.data<float>()[i];
        sums[c] += g;
        sums[p.channels + c] +=
            g * (double(x.data<float>()[i]) - mean.data<float>()[c]) * invstd.data<float>()[c];
      }
    }
  }
  sums[2 * p.channels] = static_cast<double>((end - begin) * p.spatial);
  return sums;
}

// A slot holding the first rows, given the other slot's sums through the
// collective, computes what one slot computes for those rows of the whole
// batch (SyncBatchNorm), on either backend.
TEST_F(CudaBatchNormTrainTest, SynchronizedSlotMatchesWholeBatch) {
  for (const Shape& shape : {Shape{24, 10}, Shape{10, 4, 9, 9}}) {
    const int64_t rows = shape[0], first = rows / 3;
    const std::string label = TensorTypeToString(TensorType{DType::kFloat32, shape});
    const Tensor x = Random(shape, 21, 1.0f, 2.0f);
    const KernelCall whole = TrainCall(x, 1e-4f, 0.8f, 22);
    absl::StatusOr<std::vector<Tensor>> expected = RunKernel(*gpu_, whole);
    ASSERT_TRUE(expected.ok()) << expected.status();

    FakeCollective train_collective(TrainSums(x, first, rows));
    RunContext step;
    step.global_rows = rows;
    step.collective = &train_collective;
    KernelCall slot = whole;
    slot.inputs[0] = *x.SliceRows(0, first);
    slot.context = step;
    for (Device* device : {cpu_.get(), gpu_.get()}) {
      const std::string what = absl::StrCat("BatchNormTrain, slot of ", label, " on ",
                                            device == gpu_.get() ? "cuda" : "cpu");
      absl::StatusOr<std::vector<Tensor>> actual = RunKernel(*device, slot);
      ASSERT_TRUE(actual.ok()) << what << ": " << actual.status();
      ASSERT_EQ(actual->size(), 5u);
      ExpectNear((*actual)[0], *(*expected)[0].SliceRows(0, first), what + ", Y");
      for (int o = 1; o < 5; ++o) {
        ExpectNear((*actual)[o], (*expected)[o], absl::StrCat(what, ", output ", o));
      }
    }

    const Tensor dy = Random(shape, 23);
    const Tensor& mean = (*expected)[1];
    const Tensor& invstd = (*expected)[2];
    absl::StatusOr<std::vector<Tensor>> whole_grad =
        RunKernel(*gpu_, GradCall(x, *whole.inputs[1], mean, invstd, dy));
    ASSERT_TRUE(whole_grad.ok()) << whole_grad.status();
    FakeCollective grad_collective(GradSums(x, dy, mean, invstd, first, rows));
    step.collective = &grad_collective;
    KernelCall slot_grad =
        GradCall(*x.SliceRows(0, first), *whole.inputs[1], mean, invstd, *dy.SliceRows(0, first));
    slot_grad.context = step;
    const std::vector<double> own = GradSums(x, dy, mean, invstd, 0, first);
    const int64_t c = PlanesOf(shape).channels;
    for (Device* device : {cpu_.get(), gpu_.get()}) {
      const std::string what = absl::StrCat("BatchNormGrad, slot of ", label, " on ",
                                            device == gpu_.get() ? "cuda" : "cpu");
      absl::StatusOr<std::vector<Tensor>> actual = RunKernel(*device, slot_grad);
      ASSERT_TRUE(actual.ok()) << what << ": " << actual.status();
      ASSERT_EQ(actual->size(), 3u);
      ExpectNear((*actual)[0], *(*whole_grad)[0].SliceRows(0, first), what + ", dX");
      // dscale and dB are the slot's own rows' sums, not the step's.
      Tensor dscale = Tensor::Host(DType::kFloat32, {c});
      Tensor dbias = Tensor::Host(DType::kFloat32, {c});
      for (int64_t i = 0; i < c; ++i) {
        dbias.data<float>()[i] = static_cast<float>(own[i]);
        dscale.data<float>()[i] = static_cast<float>(own[c + i]);
      }
      ExpectNear((*actual)[1], dscale, what + ", dscale");
      ExpectNear((*actual)[2], dbias, what + ", dB");
    }
  }
}

}  // namespace
}  // namespace replicad
