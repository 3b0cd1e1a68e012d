// GatherElements, GatherND, ScatterElements, ScatterND and OneHot on CUDA
// (cuda_indexing_kernels.cc, indexing.cu) against the CPU kernels, exactly:
// they only move or combine elements, and the scatters combine each
// target's updates in the CPU's order (float sums chosen so that another
// order would show). Indices as request data and as values known when the
// plan is made; an index out of range fails both backends with
// InvalidArgument and the same message, and the next run is unaffected.
// Skips without a GPU (CTest label gpu).

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::Floats;
using testing::Int64s;
using testing::KernelCall;
using testing::RunKernel;

constexpr double kExact = 0.0;

// Indices in [-dim, dim), negative ones among them.
Tensor RandomIndices(Shape shape, int64_t dim, uint64_t seed) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> index(-dim, dim - 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int64_t>()[i] = index(random);
  return t;
}

// Index tuples into the leading dims of `dims`, `count` of them.
Tensor RandomTuples(Shape shape, const std::vector<int64_t>& dims, uint64_t seed) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  std::mt19937_64 random(seed);
  const int64_t k = static_cast<int64_t>(dims.size());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int64_t dim = dims[i % k];
    t.data<int64_t>()[i] = std::uniform_int_distribution<int64_t>(-dim, dim - 1)(random);
  }
  return t;
}

Tensor RandomInt64s(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> value(-1000, 1000);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int64_t>()[i] = value(random);
  return t;
}

Tensor Random(Shape shape, uint64_t seed) { return testing::RandomTensor(std::move(shape), seed); }

KernelCall Call(std::string op_type, std::vector<Tensor> inputs) {
  KernelCall call;
  call.op_type = std::move(op_type);
  for (Tensor& t : inputs) call.inputs.push_back(std::move(t));
  return call;
}

KernelCall WithInt(KernelCall call, const std::string& name, int64_t value) {
  call.attributes.Set(name, value);
  return call;
}

KernelCall WithReduction(KernelCall call, const std::string& reduction) {
  call.attributes.Set("reduction", reduction);
  call.opset = 18;  // max and min.
  return call;
}

// The same call with input 1 (the indices) known when the plan is made.
KernelCall WithConstantIndices(KernelCall call) {
  call.constant_inputs.push_back(1);
  return call;
}

using CudaIndexingKernelsTest = testing::CpuAndGpuTest;

TEST_F(CudaIndexingKernelsTest, GatherElementsMatchesTheCpu) {
  ExpectKernelMatchesCpu(Call("GatherElements", {Random({5, 7}, 1), RandomIndices({9, 7}, 5, 2)}),
                         "axis 0", kExact);
  // A middle axis; indices smaller than data outside it.
  const KernelCall middle = WithInt(
      Call("GatherElements", {Random({3, 6, 5}, 3), RandomIndices({2, 8, 4}, 6, 4)}), "axis", 1);
  ExpectKernelMatchesCpu(middle, "axis 1", kExact);
  ExpectKernelMatchesCpu(WithConstantIndices(middle), "axis 1, indices known", kExact);
  ExpectKernelMatchesCpu(
      WithInt(Call("GatherElements", {RandomInt64s({4, 3, 2}, 5), RandomIndices({4, 3, 2}, 2, 6)}),
              "axis", -1),
      "int64 data, axis -1", kExact);
}

TEST_F(CudaIndexingKernelsTest, GatherNdMatchesTheCpu) {
  // k = rank: scalars; k < rank: slices; as data and known when planned.
  const KernelCall scalars =
      Call("GatherND", {Random({4, 5, 6}, 7), RandomTuples({7, 3}, {4, 5, 6}, 8)});
  const KernelCall slices =
      Call("GatherND", {Random({4, 5, 6}, 9), RandomTuples({2, 3, 2}, {4, 5}, 10)});
  ExpectKernelMatchesCpu(scalars, "k = rank", kExact);
  ExpectKernelMatchesCpu(WithConstantIndices(scalars), "k = rank, indices known", kExact);
  ExpectKernelMatchesCpu(slices, "k < rank", kExact);
  ExpectKernelMatchesCpu(WithConstantIndices(slices), "k < rank, indices known", kExact);
  // batch_dims 1: each of the 3 batches picks its own rows.
  const KernelCall batched = WithInt(
      Call("GatherND", {Random({3, 4, 5}, 11), RandomTuples({3, 2, 1}, {4}, 12)}), "batch_dims", 1);
  ExpectKernelMatchesCpu(batched, "batch_dims 1", kExact);
  ExpectKernelMatchesCpu(WithConstantIndices(batched), "batch_dims 1, indices known", kExact);
  ExpectKernelMatchesCpu(
      WithInt(Call("GatherND", {RandomInt64s({3, 4, 5}, 13), RandomTuples({3, 6, 2}, {4, 5}, 14)}),
              "batch_dims", 1),
      "int64 data, batch_dims 1, k = rank - 1", kExact);
}

TEST_F(CudaIndexingKernelsTest, ScatterNdNoneKeepsTheLaterUpdate) {
  // Rows 1 (twice, as 1 and -4) and 3: the third update wins row 1.
  const KernelCall rows =
      Call("ScatterND", {Random({4, 6}, 15), Int64s({3, 1}, {1, 3, -4}), Random({3, 6}, 16)});
  ExpectKernelMatchesCpu(rows, "rows", kExact);
  ExpectKernelMatchesCpu(WithConstantIndices(rows), "rows, indices known", kExact);
  // Scalars (k = rank), many to few targets.
  ExpectKernelMatchesCpu(
      Call("ScatterND", {Random({3, 4}, 17), RandomTuples({40, 2}, {3, 4}, 18), Random({40}, 19)}),
      "scalars", kExact);
}

TEST_F(CudaIndexingKernelsTest, ScatterNdReductionsMatchTheCpu) {
  // 1e8 + 1 rounds back to 1e8 in float32: (0 + 1e8 + 1) - 1e8 is 0, where
  // adding the 1 last gives 1.
  ExpectKernelMatchesCpu(
      WithReduction(Call("ScatterND", {Floats({2}, {0, 5}), Int64s({4, 1}, {0, -2, 0, 1}),
                                       Floats({4}, {1e8f, 1, -1e8f, 2})}),
                    "add"),
      "add, order shows", kExact);
  for (const std::string reduction : {"add", "mul", "max", "min"}) {
    const KernelCall call = WithReduction(
        Call("ScatterND",
             {Random({5, 8}, 20), RandomTuples({30, 1}, {5}, 21), Random({30, 8}, 22)}),
        reduction);
    ExpectKernelMatchesCpu(call, reduction + ", rows", kExact);
    ExpectKernelMatchesCpu(WithConstantIndices(call), reduction + ", rows, indices known", kExact);
    ExpectKernelMatchesCpu(
        WithReduction(Call("ScatterND", {Random({3, 4}, 23), RandomTuples({50, 2}, {3, 4}, 24),
                                         Random({50}, 25)}),
                      reduction),
        reduction + ", scalars", kExact);
  }
  ExpectKernelMatchesCpu(
      WithReduction(Call("ScatterND", {RandomInt64s({4, 3}, 26), RandomTuples({9, 1}, {4}, 27),
                                       RandomInt64s({9, 3}, 28)}),
                    "add"),
      "int64 add", kExact);
}

TEST_F(CudaIndexingKernelsTest, ScatterElementsMatchesTheCpu) {
  for (const std::string reduction : {"none", "add"}) {
    // Along axis 0 with repeated targets; along the last axis with indices
    // smaller than data.
    KernelCall rows = Call("ScatterElements",
                           {Random({4, 5}, 29), RandomIndices({6, 5}, 4, 30), Random({6, 5}, 31)});
    rows.attributes.Set("reduction", reduction);
    ExpectKernelMatchesCpu(rows, reduction + ", axis 0", kExact);
    ExpectKernelMatchesCpu(WithConstantIndices(rows), reduction + ", axis 0, indices known",
                           kExact);
    KernelCall columns = WithInt(
        Call("ScatterElements",
             {Random({3, 4, 6}, 32), RandomIndices({2, 3, 9}, 6, 33), Random({2, 3, 9}, 34)}),
        "axis", -1);
    columns.attributes.Set("reduction", reduction);
    ExpectKernelMatchesCpu(columns, reduction + ", axis -1", kExact);
  }
  KernelCall order = Call("ScatterElements", {Floats({1, 2}, {0, 7}), Int64s({1, 4}, {0, 0, -2, 1}),
                                              Floats({1, 4}, {1e8f, 1, -1e8f, 3})});
  order.attributes.Set("axis", int64_t{1});
  order.attributes.Set("reduction", std::string("add"));
  ExpectKernelMatchesCpu(order, "add, order shows", kExact);
  ExpectKernelMatchesCpu(
      WithReduction(Call("ScatterElements", {RandomInt64s({5, 3}, 35), RandomIndices({7, 3}, 5, 36),
                                             RandomInt64s({7, 3}, 37)}),
                    "max"),
      "int64 max", kExact);
}

TEST_F(CudaIndexingKernelsTest, OneHotMatchesTheCpu) {
  // Negative indices count from depth's end; 3, 7 and -4 are off the end.
  const Tensor depth = Int64s({}, {3});
  const Tensor values = Floats({2}, {-1, 5});
  KernelCall last = Call("OneHot", {Int64s({2, 3}, {0, -1, 3, 7, -4, 2}), depth, values});
  last.constant_inputs = {1};
  ExpectKernelMatchesCpu(last, "axis -1", kExact);
  KernelCall first = WithInt(last, "axis", 0);
  ExpectKernelMatchesCpu(first, "axis 0", kExact);
  // Float indices truncate toward zero; NaN and infinities hit nothing.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  KernelCall floats =
      WithInt(Call("OneHot", {Floats({2, 4}, {1.7f, -0.5f, -1.2f, 3.5f, nan, inf, -inf, -2.9f}),
                              Floats({}, {4.9f}), Int64s({2}, {7, -9})}),
              "axis", 1);
  floats.constant_inputs = {1};
  ExpectKernelMatchesCpu(floats, "float indices, int64 values, axis 1", kExact);
}

TEST_F(CudaIndexingKernelsTest, IndicesOutOfRangeAreRefusedAsOnTheCpu) {
  KernelCall elements = Call("GatherElements", {Random({2, 3}, 38), Int64s({1, 3}, {0, -2, 2})});
  KernelCall good = elements;
  good.inputs[1] = Int64s({1, 3}, {0, -2, 1});
  ExpectRefusedAlike(elements, good, "holds 2 at position 2; expected an index in [-2, 1]");

  KernelCall scatter_elements =
      WithInt(Call("ScatterElements",
                   {Random({2, 3}, 39), Int64s({2, 2}, {0, 2, -4, 1}), Random({2, 2}, 40)}),
              "axis", 1);
  good = scatter_elements;
  good.inputs[1] = Int64s({2, 2}, {0, 2, -3, 1});
  ExpectRefusedAlike(scatter_elements, good,
                     "holds -4 at position 2; expected an index in [-3, 2]");

  KernelCall gather_nd = Call("GatherND", {Random({2, 3}, 41), Int64s({2, 2}, {1, 2, 0, 3})});
  good = gather_nd;
  good.inputs[1] = Int64s({2, 2}, {1, 2, 0, -3});
  ExpectRefusedAlike(gather_nd, good, "holds 3 at position 3; expected an index in [-3, 2]");
  // Known when planned: the GPU refuses when the kernel is built, the CPU
  // when it runs; the same message.
  ExpectRefusedAlike(WithConstantIndices(gather_nd), WithConstantIndices(good),
                     "holds 3 at position 3; expected an index in [-3, 2]");

  KernelCall scatter_nd = WithReduction(
      Call("ScatterND", {Random({4, 2}, 42), Int64s({3, 1}, {1, -5, 0}), Random({3, 2}, 43)}),
      "add");
  good = scatter_nd;
  good.inputs[1] = Int64s({3, 1}, {1, -4, 1});
  ExpectRefusedAlike(scatter_nd, good, "holds -5 at position 1; expected an index in [-4, 3]");
}

}  // namespace
}  // namespace replicad
