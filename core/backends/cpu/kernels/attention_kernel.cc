#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/avx512.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/attention_attributes.h"
#include "core/ops/op_util.h"
#include "dnnl.h"

namespace replicad {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// Softmax of one row in place, exp(x - max) / sum. A NaN anywhere, an
// infinity, or a row of -inf only (every key masked) makes the whole row NaN,
// as ONNX Runtime and PyTorch give it: x - max is NaN somewhere, and the sum
// carries it to every element.
void SoftmaxRowPortable(float* x, int64_t n) {
  float max = kMinusInfinity;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inverse = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inverse;
}

// exp(v) for v = x - max <= 0 (or NaN), with exp below -87 taken as 0
// (Exp16's range; exp(-87) is 1.6e-38, nothing next to the row's largest
// term, 1). max(lo, v) keeps a NaN v: max returns its second operand when
// either is NaN.
__attribute__((target("avx512f"))) __m512 ExpOfShifted16(__m512 v) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __m512 e = Exp16(_mm512_max_ps(lo, v));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), e, _mm512_setzero_ps());
}

// As SoftmaxRowPortable, 16 floats at a time.
__attribute__((target("avx512f"))) void SoftmaxRowAvx512(float* x, int64_t n) {
  const __m512 minus_infinity = _mm512_set1_ps(kMinusInfinity);
  const __mmask16 tail = static_cast<__mmask16>((1u << (n % 16)) - 1);
  const int64_t whole = n - n % 16;
  __m512 max = minus_infinity;
  for (int64_t i = 0; i < whole; i += 16) max = _mm512_max_ps(max, _mm512_loadu_ps(x + i));
  if (tail != 0) max = _mm512_max_ps(max, _mm512_mask_loadu_ps(minus_infinity, tail, x + whole));
  const __m512 row_max = _mm512_set1_ps(_mm512_reduce_max_ps(max));
  const __m512 zero = _mm512_setzero_ps();
  __m512 sum = zero;
  for (int64_t i = 0; i < whole; i += 16) {
    const __m512 e = ExpOfShifted16(_mm512_sub_ps(_mm512_loadu_ps(x + i), row_max));
    _mm512_storeu_ps(x + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail != 0) {
    const __m512 e = ExpOfShifted16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + whole), row_max));
    _mm512_mask_storeu_ps(x + whole, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
  }
  const __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < whole; i += 16) {
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inverse));
  }
  if (tail != 0) {
    _mm512_mask_storeu_ps(x + whole, tail,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + whole), inverse));
  }
}

// One step over `rows` rows of scores [rows, n] starting at query row `m0`
// of batch entry `b`.
void ApplyStep(const AttentionStep& step, const AttentionOperand& operand,
               const AttentionOperand& condition, const void* const* inputs, int64_t b, int64_t m0,
               int64_t rows, int64_t n, float* scores) {
  const float* values =
      static_cast<const float*>(inputs[operand.input]) + operand.view.batch_offsets[b];
  const uint8_t* flags =
      condition.input < 0
          ? nullptr
          : static_cast<const uint8_t*>(inputs[condition.input]) + condition.view.batch_offsets[b];
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores + r * n;
    const float* value = values + (m0 + r) * operand.view.row_stride;
    const int64_t step_of_value = operand.view.col_stride;
    switch (step.kind) {
      case AttentionStep::Kind::kMul:
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) s[c] *= value[c * step_of_value];
        break;
      case AttentionStep::Kind::kDiv:
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) s[c] /= value[c * step_of_value];
        break;
      case AttentionStep::Kind::kAdd:
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) s[c] += value[c * step_of_value];
        break;
      case AttentionStep::Kind::kFillWhere:
      case AttentionStep::Kind::kFillUnless: {
        // The engine does not trust a bool byte to be 0 or 1: any other
        // value is true.
        const bool fill_if = step.kind == AttentionStep::Kind::kFillWhere;
        const uint8_t* flag = flags + (m0 + r) * condition.view.row_stride;
        const int64_t step_of_flag = condition.view.col_stride;
        for (int64_t c = 0; c < n; ++c) {
          if ((flag[c * step_of_flag] != 0) == fill_if) s[c] = value[c * step_of_value];
        }
        break;
      }
    }
  }
}

// A block of query rows at a time, each on one thread: their scores (a
// block's [rows, N], in the thread's part of the workspace, cache-sized),
// the steps, the softmax, then the block's rows of the output. The two
// products are oneDNN's sgemm, which runs on the calling thread inside a
// parallel region. Blocks are cut so that every thread of the slot has work
// even for one sequence of a few heads.
class AttentionKernel : public Kernel {
 public:
  AttentionKernel(std::string node, AttentionLayout layout)
      : node_(std::move(node)), layout_(std::move(layout)) {
    // Up to 64 KiB of scores per block (rows of N floats), at least 8 rows.
    max_block_ = std::clamp<int64_t>(16384 / std::max<int64_t>(layout_.n, 1), 8, 256);
    max_block_ = std::min(max_block_, std::max<int64_t>(layout_.m, 1));
    scratch_floats_ = max_block_ * std::max<int64_t>(layout_.n, 1);
    scratch_threads_ = std::max(omp_get_num_procs(), omp_get_max_threads());
  }

  size_t workspace_bytes() const override {
    return static_cast<size_t>(scratch_threads_ * scratch_floats_) * sizeof(float);
  }
  void SetWorkspace(void* workspace) override { workspace_ = static_cast<float*>(workspace); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int64_t m = layout_.m;
    const int threads =
        static_cast<int>(std::min<int64_t>(omp_get_max_threads(), scratch_threads_));
    // Enough blocks for four per thread where the rows allow it.
    const int64_t per_entry = (4 * threads + layout_.batch - 1) / layout_.batch;
    const int64_t block = std::clamp<int64_t>((m + per_entry - 1) / per_entry, 1, max_block_);
    const int64_t blocks = (m + block - 1) / block;
    const int64_t tasks = layout_.batch * blocks;
    std::atomic<int> failed{dnnl_success};
#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1)
    {
      float* scores = workspace_ + omp_get_thread_num() * scratch_floats_;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t b = t / blocks;
        const int64_t m0 = (t % blocks) * block;
        const dnnl_status_t status =
            Block(inputs, static_cast<float*>(outputs[0]), b, m0, std::min(block, m - m0), scores);
        if (status != dnnl_success) failed.store(status);
      }
    }
    if (failed.load() != dnnl_success) {
      return absl::InternalError(
          absl::StrCat(node_, ": oneDNN's sgemm failed with status ", failed.load()));
    }
    return absl::OkStatus();
  }

 private:
  dnnl_status_t Block(const void* const* inputs, float* output, int64_t b, int64_t m0, int64_t rows,
                      float* scores) const {
    const int64_t k = layout_.k, n = layout_.n, d = layout_.d;
    const MatrixView& o = layout_.output;
    float* out = output + o.batch_offsets[b] + m0 * o.row_stride;
    if (n == 0) {  // No keys: each output row is an empty sum.
      for (int64_t r = 0; r < rows; ++r) {
        std::memset(out + r * o.row_stride, 0, static_cast<size_t>(d) * sizeof(float));
      }
      return dnnl_success;
    }
    const Operand q = OperandOf(layout_.q, inputs[0], b, m0);
    const Operand kt = OperandOf(layout_.kt, inputs[1], b, 0);
    const Operand v = OperandOf(layout_.v, inputs[2], b, 0);
    if (k == 0) {
      std::memset(scores, 0, static_cast<size_t>(rows * n) * sizeof(float));
    } else if (dnnl_status_t s = dnnl_sgemm(q.trans, kt.trans, rows, n, k, 1.0f, q.data, q.ld,
                                            kt.data, kt.ld, 0.0f, scores, n);
               s != dnnl_success) {
      return s;
    }
    for (size_t i = 0; i < layout_.steps.size(); ++i) {
      ApplyStep(layout_.steps[i], layout_.operands[i], layout_.conditions[i], inputs, b, m0, rows,
                n, scores);
    }
    const bool avx512 = HasAvx512();
    for (int64_t r = 0; r < rows; ++r) {
      if (avx512) {
        SoftmaxRowAvx512(scores + r * n, n);
      } else {
        SoftmaxRowPortable(scores + r * n, n);
      }
    }
    if (d == 0) return dnnl_success;
    return dnnl_sgemm('N', v.trans, rows, d, n, 1.0f, scores, n, v.data, v.ld, 0.0f, out,
                      o.row_stride);
  }

  // A matrix as sgemm reads it (row-major): 'N' with its row stride where
  // its columns are unit-stride, else 'T' with its column stride (a
  // transposed view). Rows from `row` on.
  struct Operand {
    char trans;
    const float* data;
    int64_t ld;
  };
  static Operand OperandOf(const MatrixView& view, const void* input, int64_t b, int64_t row) {
    const float* data =
        static_cast<const float*>(input) + view.batch_offsets[b] + row * view.row_stride;
    if (view.col_stride == 1) return {'N', data, std::max<int64_t>(view.row_stride, 1)};
    return {'T', data, std::max<int64_t>(view.col_stride, 1)};
  }

  std::string node_;
  AttentionLayout layout_;
  int64_t max_block_ = 1;
  int64_t scratch_floats_ = 1;  // A thread's scores: max_block_ rows of N.
  int64_t scratch_threads_ = 1;
  float* workspace_ = nullptr;
};

}  // namespace

KernelOrStatus MakeAttentionKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(AttentionLayout layout, ParseAttentionLayout(spec));
  return std::make_unique<AttentionKernel>(NodeLabel(spec), std::move(layout));
}

}  // namespace replicad
