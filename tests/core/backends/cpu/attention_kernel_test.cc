// replicad.Attention on CPU (attention_kernel.cc) against a double-precision
// reference written here: the two products, the steps and the softmax
// computed one after another, as the unfused graph would. Shapes cover the
// AVX-512 softmax's whole vectors and tails, blocks of query rows that do
// not divide M, several blocks per thread, broadcast batch dims (one K and V
// for every head) and scores too wide for one block. Non-finite cases follow
// ONNX Runtime and PyTorch: a fully masked row, a NaN query or an infinite
// score gives a NaN row. Tolerance: 2e-5 + 2e-5 * |expected| per element
// (float sums over up to 3000 keys against double ones).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/ops/attention_attributes.h"
#include "core/ops/broadcast.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;
using Kind = AttentionStep::Kind;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Element `index` (of `out`'s rank) of `t`, broadcast into `out`.
template <typename T>
T At(const Tensor& t, const Shape& out, const std::vector<int64_t>& index) {
  const Shape padded = PadToRank(t.shape(), out.size());
  int64_t offset = 0;
  for (size_t d = 0; d < out.size(); ++d)
    offset = offset * padded[d] + (padded[d] == 1 ? 0 : index[d]);
  return t.data<T>()[offset];
}

// inputs: Q, Kt, V, then the steps' operands, as the node takes them.
Tensor Reference(const std::vector<Tensor>& inputs, const std::vector<AttentionStep>& steps) {
  const Tensor &q = inputs[0], &kt = inputs[1], &v = inputs[2];
  const int64_t m = q.shape()[q.rank() - 2], k = q.shape().back(), n = kt.shape().back(),
                d = v.shape().back();
  auto batch_of = [](const Tensor& t) {
    const Shape padded = PadToRank(t.shape(), std::max<size_t>(t.rank(), 2));
    return Shape(padded.begin(), padded.end() - 2);
  };
  // The batch dims of every input but the steps' conditions' and operands'
  // last two: the unfused nodes broadcast them all.
  Shape batch = batch_of(q);
  for (size_t i = 1; i < inputs.size(); ++i) batch = *BroadcastShapes(batch, batch_of(inputs[i]));
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(d);
  Tensor out = Tensor::Host(DType::kFloat32, out_shape);
  const int64_t entries = NumElements(batch);
  for (int64_t b = 0; b < entries; ++b) {
    std::vector<int64_t> index(batch.size());
    for (int64_t rest = b, i = static_cast<int64_t>(batch.size()) - 1; i >= 0; --i) {
      index[i] = rest % batch[i];
      rest /= batch[i];
    }
    for (int64_t r = 0; r < m; ++r) {
      std::vector<double> s(n);
      for (int64_t c = 0; c < n; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) {
          std::vector<int64_t> qi = index, ki = index;
          qi.insert(qi.end(), {r, j});
          ki.insert(ki.end(), {j, c});
          Shape qs = batch, ks = batch;
          qs.insert(qs.end(), {m, k});
          ks.insert(ks.end(), {k, n});
          sum += static_cast<double>(At<float>(q, qs, qi)) * At<float>(kt, ks, ki);
        }
        s[c] = sum;
        Shape ss = batch;
        ss.insert(ss.end(), {m, n});
        std::vector<int64_t> si = index;
        si.insert(si.end(), {r, c});
        for (const AttentionStep& step : steps) {
          const double operand = At<float>(inputs[step.operand], ss, si);
          const bool flag = step.condition >= 0 && At<uint8_t>(inputs[step.condition], ss, si) != 0;
          switch (step.kind) {
            case Kind::kMul:
              s[c] *= operand;
              break;
            case Kind::kDiv:
              s[c] /= operand;
              break;
            case Kind::kAdd:
              s[c] += operand;
              break;
            case Kind::kFillWhere:
              s[c] = flag ? operand : s[c];
              break;
            case Kind::kFillUnless:
              s[c] = flag ? s[c] : operand;
              break;
          }
        }
      }
      double max = -INFINITY;
      for (double x : s) max = std::isnan(x) || x > max ? x : max;
      double total = 0;
      for (double& x : s) {
        x = std::exp(x - max);
        total += x;
      }
      for (int64_t e = 0; e < d; ++e) {
        double sum = 0;
        for (int64_t c = 0; c < n; ++c) {
          std::vector<int64_t> vi = index;
          vi.insert(vi.end(), {c, e});
          Shape vs = batch;
          vs.insert(vs.end(), {n, d});
          sum += s[c] / total * At<float>(v, vs, vi);
        }
        out.data<float>()[(b * m + r) * d + e] = static_cast<float>(sum);
      }
    }
  }
  return out;
}

Tensor Bools(Shape shape, const std::vector<uint8_t>& values) {
  return Of<uint8_t>(DType::kBool, std::move(shape), values);
}

// Row r, column c set where `keep(r, c)`, as a bool [rows, cols].
template <typename F>
Tensor BoolMatrix(int64_t rows, int64_t cols, F keep) {
  std::vector<uint8_t> values;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) values.push_back(keep(r, c) ? 1 : 0);
  }
  return Bools({rows, cols}, values);
}

class AttentionKernelTest : public CpuKernelTestBase {
 protected:
  absl::StatusOr<Tensor> RunAttention(const std::vector<Tensor>& inputs,
                                      const std::vector<AttentionStep>& steps) {
    Attributes attributes;
    WriteAttentionSteps(steps, &attributes);
    std::vector<std::optional<Tensor>> optional(inputs.begin(), inputs.end());
    absl::StatusOr<std::vector<Tensor>> outputs =
        Run(std::string(kAttention), optional, attributes);
    if (!outputs.ok()) return outputs.status();
    return (*outputs)[0];
  }

  // Runs the node and compares with Reference: NaN where it is NaN, near it
  // elsewhere.
  void ExpectMatches(const std::vector<Tensor>& inputs, const std::vector<AttentionStep>& steps) {
    absl::StatusOr<Tensor> actual = RunAttention(inputs, steps);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const Tensor expected = Reference(inputs, steps);
    ASSERT_EQ(actual->type(), expected.type());
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      const float e = expected.data<float>()[i];
      const float a = actual->data<float>()[i];
      if (std::isnan(e)) {
        ASSERT_TRUE(std::isnan(a)) << "element " << i << ": " << a << ", expected NaN";
      } else {
        ASSERT_NEAR(a, e, 2e-5 + 2e-5 * std::fabs(e)) << "element " << i;
      }
    }
  }
};

TEST_F(AttentionKernelTest, PlainAttentionAcrossVectorTailsAndBlocks) {
  // N of 7 (a tail only), 16 (one whole vector), 41 (two and a tail); M of
  // 197, as ViT's tokens, which no block size divides.
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {33, 16}, {197, 41}}) {
    SCOPED_TRACE(::testing::Message() << "M " << m << ", N " << n);
    ExpectMatches({Random({2, 3, m, 8}, 1), Random({2, 3, 8, n}, 2), Random({2, 3, n, 6}, 3)}, {});
  }
}

TEST_F(AttentionKernelTest, ScaleMaskAndCausalFillInGraphOrder) {
  const int64_t m = 20, n = 20;
  const std::vector<Tensor> inputs = {
      Random({2, 4, m, 8}, 4),
      Random({2, 4, 8, n}, 5),
      Random({2, 4, n, 8}, 6),
      Of<float>(DType::kFloat32, {}, {0.125f}),                      // 3: scale
      Random({2, 1, 1, n}, 7),                                       // 4: additive mask
      BoolMatrix(m, n, [](int64_t r, int64_t c) { return c > r; }),  // 5: causal
      Of<float>(DType::kFloat32, {1}, {-kInf}),                      // 6: fill
  };
  ExpectMatches(inputs, {{Kind::kMul, 3, -1}, {Kind::kAdd, 4, -1}, {Kind::kFillWhere, 6, 5}});
}

TEST_F(AttentionKernelTest, DivAndAKeepMaskThatFillsWhereFalse) {
  const int64_t n = 12;
  std::vector<uint8_t> keep(2 * n, 1);
  for (int64_t c = 9; c < n; ++c) keep[c] = 0;  // Entry 0 pads its last 3 keys.
  const std::vector<Tensor> inputs = {
      Random({2, 2, 6, 4}, 8),
      Random({2, 2, 4, n}, 9),
      Random({2, 2, n, 5}, 10),
      Of<float>(DType::kFloat32, {}, {2.0f}),   // 3
      Bools({2, 1, 1, n}, keep),                // 4
      Of<float>(DType::kFloat32, {}, {-1e9f}),  // 5
      Random({2, 6, n}, 11),                    // 6: a bias per head
  };
  ExpectMatches(inputs, {{Kind::kDiv, 3, -1}, {Kind::kFillUnless, 5, 4}, {Kind::kAdd, 6, -1}});
}

TEST_F(AttentionKernelTest, KeysAndValuesSharedAcrossHeadsBroadcast) {
  // Multi-query attention: one Kt and V per sequence, 4 query heads.
  ExpectMatches({Random({3, 4, 10, 8}, 12), Random({3, 1, 8, 10}, 13), Random({3, 1, 10, 8}, 14)},
                {});
  // And a 3-D Q against 4-D keys: the batch dims broadcast as MatMul's.
  ExpectMatches({Random({4, 10, 8}, 15), Random({2, 1, 8, 10}, 16), Random({1, 4, 10, 3}, 17)}, {});
}

TEST_F(AttentionKernelTest, AMaskMayAddBatchDimsAsTheUnfusedAddDid) {
  // Scores [2, 5, 6] plus a mask [3, 1, 5, 6]: the output is [3, 2, 5, 4].
  ExpectMatches(
      {Random({2, 5, 8}, 34), Random({2, 8, 6}, 35), Random({6, 4}, 36), Random({3, 1, 5, 6}, 37)},
      {{Kind::kAdd, 3, -1}});
}

// `t` transposed by `perm` (Transpose's semantics).
Tensor Transposed(const Tensor& t, const std::vector<int64_t>& perm) {
  Shape shape;
  for (int64_t p : perm) shape.push_back(t.shape()[p]);
  Tensor out = Tensor::Host(t.dtype(), shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::vector<int64_t> source(shape.size());
    for (size_t d = 0; d < perm.size(); ++d) source[perm[d]] = index[d];
    out.data<float>()[i] = t.data<float>()[Offset(t.shape(), source)];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// GPT-2's layout: Q, K and V as [N, S, H, d] slices of one projection, the
// output [N, S, H, d] again. The node reads them through perms (Kt's puts
// the source's last dim in the rows: sgemm's transposed form) and writes
// through one; the answer is the reference on the transposed copies,
// transposed back.
TEST_F(AttentionKernelTest, InputsAndOutputReadAndWrittenThroughPerms) {
  const Tensor q = Random({2, 9, 3, 4}, 40), k = Random({2, 9, 3, 4}, 41),
               v = Random({2, 9, 3, 5}, 42);
  const std::vector<int64_t> heads_first = {0, 2, 1, 3}, keys_transposed = {0, 2, 3, 1};
  Attributes attributes;
  WriteAttentionSteps({}, &attributes);
  attributes.Set(kAttentionPerms[0], heads_first);
  attributes.Set(kAttentionPerms[1], keys_transposed);
  attributes.Set(kAttentionPerms[2], heads_first);
  attributes.Set(kAttentionPerms[3], heads_first);
  absl::StatusOr<std::vector<Tensor>> y = Run(std::string(kAttention), {q, k, v}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  const Tensor expected = Transposed(
      Reference(
          {Transposed(q, heads_first), Transposed(k, keys_transposed), Transposed(v, heads_first)},
          {}),
      heads_first);
  ExpectNear((*y)[0], expected);
  // A perm that leaves no unit stride in a matrix, and one that moves D.
  attributes.Set(kAttentionPerms[1], std::vector<int64_t>{3, 2, 0, 1});
  EXPECT_THAT(Run(std::string(kAttention), {q, k, v}, attributes).status().message(),
              HasSubstr("keeping the last one among the last two, received [3,2,0,1]"));
  attributes.Set(kAttentionPerms[1], keys_transposed);
  attributes.Set(kAttentionPerms[3], std::vector<int64_t>{0, 1, 3, 2});
  EXPECT_THAT(Run(std::string(kAttention), {q, k, v}, attributes).status().message(),
              HasSubstr("keeping the last, received [0,1,3,2]"));
}

TEST_F(AttentionKernelTest, ScoresWiderThanABlock) {
  // 3000 keys: a block holds 8 rows of them, so 20 query rows take three.
  ExpectMatches(
      {Random({1, 1, 20, 4}, 18), Random({1, 1, 4, 3000}, 19), Random({1, 1, 3000, 4}, 20)}, {});
}

TEST_F(AttentionKernelTest, NonFiniteRowsBecomeNaNAsOnnxRuntimeGivesThem) {
  const int64_t m = 4, n = 18;
  Tensor q = Random({1, 1, m, 4}, 21);
  q.data<float>()[1 * 4 + 2] = std::nanf("");  // Row 1: a NaN query.
  Tensor kt = Random({1, 1, 4, n}, 22);
  Tensor bias = Tensor::Host(DType::kFloat32, {m, n});
  for (int64_t i = 0; i < m * n; ++i) bias.data<float>()[i] = 0;
  bias.data<float>()[2 * n + 17] = kInf;  // Row 2: an infinite score.
  // Row 3: every key masked.
  Tensor mask = BoolMatrix(m, n, [](int64_t r, int64_t) { return r == 3; });
  const std::vector<Tensor> inputs = {q,    kt,   Random({1, 1, n, 3}, 23),
                                      bias, mask, Of<float>(DType::kFloat32, {}, {-kInf})};
  absl::StatusOr<Tensor> y = RunAttention(inputs, {{Kind::kAdd, 3, -1}, {Kind::kFillWhere, 5, 4}});
  ASSERT_TRUE(y.ok()) << y.status();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t e = 0; e < 3; ++e) {
      EXPECT_EQ(std::isnan(y->data<float>()[r * 3 + e]), r > 0) << "row " << r << ", column " << e;
    }
  }
  ExpectMatches(inputs, {{Kind::kAdd, 3, -1}, {Kind::kFillWhere, 5, 4}});
}

TEST_F(AttentionKernelTest, NoKeysGivesZeros) {
  absl::StatusOr<Tensor> y =
      RunAttention({Random({2, 3, 4}, 24), Random({2, 4, 0}, 25), Random({2, 0, 5}, 26)}, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{2, 3, 5}));
  for (float x : Values<float>(*y)) EXPECT_EQ(x, 0.0f);
}

TEST_F(AttentionKernelTest, MalformedNodesAreRefusedNamingWhat) {
  const Tensor q = Random({2, 3, 4}, 27), kt = Random({2, 4, 5}, 28), v = Random({2, 5, 6}, 29);
  absl::StatusOr<Tensor> y = RunAttention({q, Random({2, 3, 5}, 30), v}, {});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("must chain as [.., M, K] x [.., K, N]"));
  // An operand that would enlarge the scores' [M, N].
  y = RunAttention({q, kt, v, Random({2, 4, 5}, 31)}, {{Kind::kAdd, 3, -1}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(),
              HasSubstr("input 3 must broadcast to the scores [2,3,5] without enlarging their "
                        "last two dims, received float32[2,4,5]"));
  // A fill without a bool condition, and a step naming an input it lacks.
  y = RunAttention({q, kt, v, Random({1}, 32), Random({3, 5}, 33)}, {{Kind::kFillWhere, 3, 4}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("step input 4"));
  y = RunAttention({q, kt, v}, {{Kind::kMul, 3, -1}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("expected an operand in [3, 3)"));
}

}  // namespace
}  // namespace replicad
