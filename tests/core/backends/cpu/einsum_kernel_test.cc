// Einsum against a double-precision loop over its labels (the ONNX backend cases are all
// float64, which replicad does not hold): batched matrix products on oneDNN's matmul, with
// the second operand transposed (maxvit_t's attention scores) and plain (its weighted
// values); and, on the loop, an inner product, a sum over one axis, a transpose, a diagonal,
// an ellipsis that broadcasts, an implicit output and int64 operands. Malformed equations are
// refused naming the equation and why. Tolerance 1e-5 + 1e-5 * |expected|.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class EinsumKernelTest : public CpuKernelTestBase {
 protected:
  absl::StatusOr<Tensor> Einsum(const std::string& equation, const std::vector<Tensor>& inputs) {
    Attributes attributes;
    attributes.Set("equation", equation);
    std::vector<std::optional<Tensor>> given(inputs.begin(), inputs.end());
    absl::StatusOr<std::vector<Tensor>> y = Run("Einsum", given, attributes, 12);
    if (!y.ok()) return y.status();
    return (*y)[0];
  }
};

// out[labels of `output`] = sum over the others of a[term_a] * b[term_b], in double, for
// equations without ellipsis whose labels are lower-case letters.
Tensor Reference(const std::string& term_a, const Tensor& a, const std::string& term_b,
                 const Tensor& b, const std::string& output) {
  std::map<char, int64_t> sizes;
  for (size_t d = 0; d < term_a.size(); ++d) sizes[term_a[d]] = a.shape()[d];
  for (size_t d = 0; d < term_b.size(); ++d) sizes[term_b[d]] = b.shape()[d];
  std::string labels = output;
  for (const auto& [label, size] : sizes) {
    if (output.find(label) == std::string::npos) labels += label;
  }
  Shape out_shape;
  for (char c : output) out_shape.push_back(sizes[c]);
  Tensor y = Tensor::Host(DType::kFloat32, out_shape);
  std::vector<double> sums(y.num_elements(), 0.0);
  std::map<char, int64_t> index;
  int64_t total = 1;
  for (char c : labels) total *= sizes[c];
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (size_t l = labels.size(); l-- > 0;) {
      index[labels[l]] = rest % sizes[labels[l]];
      rest /= sizes[labels[l]];
    }
    auto offset = [&](const std::string& term, const Shape& shape) {
      int64_t o = 0;
      for (size_t d = 0; d < term.size(); ++d) o = o * shape[d] + index[term[d]];
      return o;
    };
    sums[offset(output, out_shape)] +=
        static_cast<double>(a.data<float>()[offset(term_a, a.shape())]) *
        b.data<float>()[offset(term_b, b.shape())];
  }
  for (int64_t i = 0; i < y.num_elements(); ++i) y.data<float>()[i] = static_cast<float>(sums[i]);
  return y;
}

void ExpectClose(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.shape(), expected.shape());
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const float e = expected.data<float>()[i];
    ASSERT_NEAR(actual.data<float>()[i], e, 1e-5 + 1e-5 * std::fabs(e)) << "element " << i;
  }
}

TEST_F(EinsumKernelTest, BatchedMatrixProductsAsMaxVitWritesThem) {
  const Tensor q = Random({2, 3, 2, 7, 5}, 1);
  const Tensor k = Random({2, 3, 2, 6, 5}, 2);
  absl::StatusOr<Tensor> scores = Einsum("bghid,bghjd->bghij", {q, k});
  ASSERT_TRUE(scores.ok()) << scores.status();
  ExpectClose(*scores, Reference("bghid", q, "bghjd", k, "bghij"));
  const Tensor v = Random({2, 3, 2, 6, 5}, 3);
  absl::StatusOr<Tensor> values = Einsum("bghij,bghjd->bghid", {*scores, v});
  ASSERT_TRUE(values.ok()) << values.status();
  ExpectClose(*values, Reference("bghij", *scores, "bghjd", v, "bghid"));
}

TEST_F(EinsumKernelTest, OtherEquationsOnTheLoop) {
  const Tensor x = Random({4}, 4), y = Random({4}, 5);
  absl::StatusOr<Tensor> inner = Einsum("i,i", {x, y});  // Implicit output: a scalar.
  ASSERT_TRUE(inner.ok()) << inner.status();
  ExpectClose(*inner, Reference("i", x, "i", y, ""));
  const Tensor m = Random({3, 4}, 6);
  const Tensor ones = [] {
    Tensor t = Tensor::Host(DType::kFloat32, {4});
    for (int i = 0; i < 4; ++i) t.data<float>()[i] = 1.0f;
    return t;
  }();
  absl::StatusOr<Tensor> sum = Einsum("ij->i", {m});
  ASSERT_TRUE(sum.ok()) << sum.status();
  ExpectClose(*sum, Reference("ij", m, "j", ones, "i"));
  absl::StatusOr<Tensor> transposed = Einsum("ij->ji", {m});
  ASSERT_TRUE(transposed.ok()) << transposed.status();
  EXPECT_THAT(transposed->shape(), ElementsAre(4, 3));
  EXPECT_EQ(transposed->data<float>()[1 * 3 + 2], m.data<float>()[2 * 4 + 1]);
  const Tensor square = Random({3, 3}, 7);
  absl::StatusOr<Tensor> diagonal = Einsum("ii->i", {square});
  ASSERT_TRUE(diagonal.ok()) << diagonal.status();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(diagonal->data<float>()[i], square.data<float>()[i * 4]);
}

// "...ij,...jk->...ik" with batch dims [2, 1] and [3]: broadcast to [2, 3].
TEST_F(EinsumKernelTest, EllipsisBroadcastsAsNumpyDoes) {
  const Tensor a = Random({2, 1, 2, 3}, 8);
  const Tensor b = Random({3, 3, 4}, 9);
  absl::StatusOr<Tensor> y = Einsum("...ij,...jk->...ik", {a, b});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_THAT(y->shape(), ElementsAre(2, 3, 2, 4));
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t q = 0; q < 3; ++q) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t k = 0; k < 4; ++k) {
          double sum = 0;
          for (int64_t j = 0; j < 3; ++j) {
            sum += static_cast<double>(a.data<float>()[(p * 2 + i) * 3 + j]) *
                   b.data<float>()[(q * 3 + j) * 4 + k];
          }
          EXPECT_NEAR(y->data<float>()[((p * 3 + q) * 2 + i) * 4 + k], sum, 1e-5);
        }
      }
    }
  }
}

// Batch dims that broadcast crosswise ([2, 1] against [1, 2]) hold as many
// matrices on each side as the output's [2, 2] does not: the loop computes them.
TEST_F(EinsumKernelTest, BatchDimsThatBroadcastCrosswise) {
  const Tensor a = Random({2, 1, 2, 3}, 12);
  const Tensor b = Random({1, 2, 3, 2}, 13);
  absl::StatusOr<Tensor> y = Einsum("...ij,...jk->...ik", {a, b});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_THAT(y->shape(), ElementsAre(2, 2, 2, 2));
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t q = 0; q < 2; ++q) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t k = 0; k < 2; ++k) {
          double sum = 0;
          for (int64_t j = 0; j < 3; ++j) {
            sum += static_cast<double>(a.data<float>()[(p * 2 + i) * 3 + j]) *
                   b.data<float>()[(q * 3 + j) * 2 + k];
          }
          EXPECT_NEAR(y->data<float>()[((p * 2 + q) * 2 + i) * 2 + k], sum, 1e-5);
        }
      }
    }
  }
}

TEST_F(EinsumKernelTest, Int64OperandsAndMalformedEquations) {
  absl::StatusOr<Tensor> y = Einsum("ij,jk->ik", {Int64s({1, 2}, {2, 3}), Int64s({2, 1}, {5, 7})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<int64_t>()[0], 31);
  const Tensor m = Random({3, 4}, 10);
  for (const auto& [equation, why] : std::vector<std::pair<std::string, std::string>>{
           {"ij,jk->ik", "names 2 inputs; the node has 1"},
           {"ijk->i", "does not fit input 0"},
           {"ij->ii", "names a label twice"},
           {"ij->z", "'z' is in no input"},
           {"i1->i", "does not fit input 0"}}) {
    y = Einsum(equation, {m});
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << equation;
    EXPECT_THAT(std::string(y.status().message()), HasSubstr(why)) << equation;
  }
  y = Einsum("ij,ij->ij", {m, Random({3, 5}, 11)});
  EXPECT_THAT(std::string(y.status().message()), HasSubstr("label 'j' is 4 in one input and 5"));
}

}  // namespace
}  // namespace replicad
