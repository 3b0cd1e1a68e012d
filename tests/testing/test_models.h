#ifndef REPLICAD_TESTS_TESTING_TEST_MODELS_H_
#define REPLICAD_TESTS_TESTING_TEST_MODELS_H_

#include <memory>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/serve/replica_set.h"

namespace replicad::testing {

// Deterministic pseudo-random floats in [-1, 1) (SplitMix64 of `seed`).
Tensor RandomTensor(Shape shape, uint64_t seed);

// Host tensors of `shape` holding `values` in row-major order (as many as
// the shape has elements).
Tensor Floats(Shape shape, const std::vector<float>& values);
Tensor Int64s(Shape shape, const std::vector<int64_t>& values);

// Two inputs, two outputs, shared batch dim:
//   image float32[N,3,6,6] -> Conv 2x3x3 pad 1 -> Relu -> GlobalAveragePool -> Flatten [N,2]
//   features float32[N,5]  -> Gemm (5x2, bias)                               [N,2]
//   sum = Add of the two                                              float32[N,2]
//   probabilities = Softmax(MatMul(features, 5x3) * scale[3])        float32[N,3]
std::string TwoInputTwoOutputOnnx();

// x float32[N,4] -> mean = ReduceMean(x) over every element (rank 0, as a
// loss is) and y = Relu(x) [N,4].
std::string ScalarMeanOnnx();

// x, mask float32[N,S] (S open) -> running = CumSum(x, axis 1) [N,S] and
// pooled = ReduceSum(x * mask, axis 1) [N]: a model that ignores what follows
// a sequence's end, as a masked encoder and a causal decoder do.
std::string SequenceSumOnnx();

// x float32[N,width] through `layers` MatMul + Relu layers of width x width
// (He-scaled, so values stay near 1) to y float32[N,width]: 2 * width^2 FLOP
// a row a layer and little memory. Many kernels of equal cost, for runs
// long enough to be stopped between two of them.
std::string MatMulChainOnnx(int layers, int64_t width);

// A chain of convolutions, as --precision bf16/fp16 hands 16-bit values
// along: x float32[N, channels, side, side] -> Conv 3x3 pads 1 (weights[0],
// bias weights[1]) -> Relu = a -> depthwise Conv 3x3 pads 1 (weights[2],
// [3]) -> Clip [0, 6] -> Conv 1x1 (weights[4], [5]) -> Add a ->
// GlobalAveragePool -> y float32[N, wide, 1, 1]; weights[0] is [wide,
// channels, 3, 3], [2] [wide, 1, 3, 3], [4] [wide, wide, 1, 1], biases [wide].
std::string ConvChainOnnx(const std::vector<Tensor>& weights, int64_t channels, int64_t wide,
                          int64_t side);

// resnet's stem in small, between convolutions that compute in 16 bits:
// a = Relu(Conv 3 x 3, pads 1, of x [N, channels, side, side] into wide
// channels), p = MaxPool(a; 3 x 3, strides 2, pads 1), e = Relu(Conv 3 x 3,
// pads 1, of p), y = GlobalAveragePool(Conv 1 x 1 of e, plus p) [N, wide, 1,
// 1]. `weights`: wa [wide, channels, 3, 3], ba [wide], wb [wide, wide, 3, 3],
// bb [wide], wc [wide, wide, 1, 1], bc [wide]. side is even.
std::string ConvPoolChainOnnx(const std::vector<Tensor>& weights, int64_t channels, int64_t wide,
                              int64_t side);

// Loads ONNX bytes as a Model named `name`; aborts the test on failure.
std::shared_ptr<const Model> LoadOrDie(const std::string& onnx_bytes, const std::string& name);

// One replica of `model` on a CPU slot of one thread (cpu:0, named "r0");
// aborts the test when it cannot be made.
std::unique_ptr<Replica> MakeCpuReplica(std::shared_ptr<const Model> model);

// A replica set of `weights.size()` CPU slots (all on cpu:0, one thread each);
// with `wide_threads` > 0, and a wide replica of that many threads
// (ReplicaSet::Create).
std::unique_ptr<ReplicaSet> MakeCpuReplicaSet(std::shared_ptr<const Model> model,
                                              const std::vector<double>& weights,
                                              SliceObserver* observer = nullptr,
                                              int wide_threads = 0);

// An OutputSink that keeps the merged outputs as host tensors.
class TensorSink : public OutputSink {
 public:
  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override;
  std::vector<Tensor> outputs;
};

// Runs Predict and waits; returns the outputs (or the error) and the slices.
struct PredictOutcome {
  absl::Status status;
  std::vector<Tensor> outputs;
  std::vector<BatchSlice> slices;
};
PredictOutcome PredictAndWait(ReplicaSet& set, std::vector<Tensor> inputs);
// Runs `slices` asking `still_wanted` (Servable::Run) and waits.
PredictOutcome RunAndWait(Servable& servable, std::vector<Tensor> inputs,
                          std::vector<BatchSlice> slices,
                          Servable::StillWanted still_wanted = nullptr);

// ||a - b||_2 / ||b||_2 (0 when both are zero).
double RelativeL2(const Tensor& a, const Tensor& b);

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_TEST_MODELS_H_
