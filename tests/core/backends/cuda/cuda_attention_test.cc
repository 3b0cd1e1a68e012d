// replicad.Attention on CUDA (cuda_attention_kernel.cc: the absorbed
// Transposes, cuBLAS products, element-wise steps and cuDNN's softmax one
// after another) against the CPU's blocked kernel, on the forms the
// optimizer makes of exported models: plain, scaled with an additive mask,
// and GPT-2's layout read and written through perms. Float sums differ in
// order and the GPU's softmax in its exp: |cuda - cpu| <= 1e-4 * (1 + |cpu|)
// per element (TF32 off). Where masks (masked_fill) too. Skips without a GPU
// (CTest label gpu).

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/ops/attention_attributes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::KernelCall;
using testing::RunKernel;
using Kind = AttentionStep::Kind;

Tensor Random(Shape shape, uint64_t seed) { return testing::RandomTensor(std::move(shape), seed); }

class CudaAttentionTest : public testing::CpuAndGpuTest {
 protected:
  static KernelCall Call(std::vector<Tensor> inputs, const std::vector<AttentionStep>& steps) {
    KernelCall call;
    call.op_type = std::string(kAttention);
    WriteAttentionSteps(steps, &call.attributes);
    for (Tensor& t : inputs) call.inputs.push_back(std::move(t));
    return call;
  }
};

TEST_F(CudaAttentionTest, PlainAndMaskedAttentionMatchTheCpu) {
  ExpectKernelMatchesCpu(
      Call({Random({2, 4, 33, 16}, 1), Random({2, 4, 16, 33}, 2), Random({2, 4, 33, 8}, 3)}, {}),
      "plain");
  Tensor scale = Tensor::Host(DType::kFloat32, {});
  scale.data<float>()[0] = 0.25f;
  ExpectKernelMatchesCpu(Call({Random({2, 4, 20, 16}, 4), Random({2, 4, 16, 20}, 5),
                               Random({2, 4, 20, 8}, 6), scale, Random({2, 1, 1, 20}, 7)},
                              {{Kind::kMul, 3, -1}, {Kind::kAdd, 4, -1}}),
                         "scaled, additive mask");
}

TEST_F(CudaAttentionTest, PermsMatchTheCpu) {
  KernelCall call =
      Call({Random({2, 9, 3, 4}, 8), Random({2, 9, 3, 4}, 9), Random({2, 9, 3, 5}, 10)}, {});
  const std::vector<int64_t> heads_first = {0, 2, 1, 3};
  call.attributes.Set(kAttentionPerms[0], heads_first);
  call.attributes.Set(kAttentionPerms[1], std::vector<int64_t>{0, 2, 3, 1});
  call.attributes.Set(kAttentionPerms[2], heads_first);
  call.attributes.Set(kAttentionPerms[3], heads_first);
  ExpectKernelMatchesCpu(call, "GPT-2 layout");
}

// A boolean mask's fill (masked_fill, a causal mask): Where(mask, -inf, S)
// and Where(mask, S, -inf), the mask broadcast over the batch.
TEST_F(CudaAttentionTest, WhereMasksMatchTheCpu) {
  Tensor mask = Tensor::Host(DType::kBool, {6, 6});
  for (int64_t i = 0; i < 36; ++i) mask.data<uint8_t>()[i] = i % 7 == 0;  // The diagonal.
  Tensor unmasked = Tensor::Host(DType::kBool, {6, 6});
  for (int64_t i = 0; i < 36; ++i) unmasked.data<uint8_t>()[i] = i % 7 != 0;
  Tensor fill = Tensor::Host(DType::kFloat32, {});
  fill.data<float>()[0] = -INFINITY;
  ExpectKernelMatchesCpu(
      Call({Random({2, 6, 4}, 11), Random({2, 4, 6}, 12), Random({2, 6, 4}, 13), fill, mask},
           {{Kind::kFillWhere, 3, 4}}),
      "Where(mask, -inf, S)");
  ExpectKernelMatchesCpu(
      Call({Random({2, 6, 4}, 14), Random({2, 4, 6}, 15), Random({2, 6, 4}, 16), fill, unmasked},
           {{Kind::kFillUnless, 3, 4}}),
      "Where(mask, S, -inf)");
}

}  // namespace
}  // namespace replicad
