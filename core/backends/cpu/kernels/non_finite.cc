#include "core/backends/cpu/kernels/non_finite.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/avx512.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

// A NaN is the one value unordered with itself.
__attribute__((target("avx512f"))) bool AnyNaNAvx512(const float* data, size_t count) {
  __mmask16 found = 0;
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 x = _mm512_loadu_ps(data + i);
    found |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  }
  if (i < count) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(tail, data + i);
    found |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  }
  return found != 0;
}

__attribute__((target("avx2"))) bool AnyNaNAvx2(const float* data, size_t count) {
  __m256 found = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 x = _mm256_loadu_ps(data + i);
    found = _mm256_or_ps(found, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  bool any = _mm256_movemask_ps(found) != 0;
  for (; i < count; ++i) any |= std::isnan(data[i]);
  return any;
}

// x * 0 is NaN exactly where x is NaN or an infinity.
__attribute__((target("avx512f"))) bool AnyNonFiniteAvx512(const float* data, size_t count) {
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 found = 0;
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(data + i), zero);
    found |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  }
  if (i < count) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - i)) - 1);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, data + i), zero);
    found |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  }
  return found != 0;
}

__attribute__((target("avx2"))) bool AnyNonFiniteAvx2(const float* data, size_t count) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 found = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(data + i), zero);
    found = _mm256_or_ps(found, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  bool any = _mm256_movemask_ps(found) != 0;
  for (; i < count; ++i) any |= !std::isfinite(data[i]);
  return any;
}

// A bfloat16 is NaN or infinite where its 8 exponent bits are all set.
constexpr uint16_t kBFloat16Exponent = 0x7f80;

__attribute__((target("avx512f,avx512bw"))) bool AnyNonFiniteBFloat16Avx512(const uint16_t* data,
                                                                            size_t count) {
  const __m512i exponent = _mm512_set1_epi16(static_cast<int16_t>(kBFloat16Exponent));
  __mmask32 found = 0;
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512i x = _mm512_and_si512(_mm512_loadu_si512(data + i), exponent);
    found |= _mm512_cmpeq_epi16_mask(x, exponent);
  }
  if (i < count) {
    const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (count - i)) - 1);
    const __m512i x = _mm512_and_si512(_mm512_maskz_loadu_epi16(tail, data + i), exponent);
    found |= _mm512_cmpeq_epi16_mask(x, exponent);
  }
  return found != 0;
}

bool AnyNonFiniteBFloat16Share(const uint16_t* data, size_t count) {
  static const bool avx512bw = HasAvx512() && __builtin_cpu_supports("avx512bw");
  if (avx512bw) return AnyNonFiniteBFloat16Avx512(data, count);
  bool any = false;
  for (size_t i = 0; i < count; ++i) any |= (data[i] & kBFloat16Exponent) == kBFloat16Exponent;
  return any;
}

bool AnyNonFiniteShare(const float* data, size_t count) {
  if (HasAvx512()) return AnyNonFiniteAvx512(data, count);
  if (HasAvx2()) return AnyNonFiniteAvx2(data, count);
  bool any = false;
  for (size_t i = 0; i < count; ++i) any |= !std::isfinite(data[i]);
  return any;
}

// A scan reads at 14-47 GB/s on one core of a 2-core AVX2 EPYC (1.2 M
// floats in 0.10 ms), so a layer's input at batch 1 is scanned on the
// calling thread: a parallel region would save less than its fork and join
// cost, and with the cores busy with other work each join can wait
// milliseconds. Larger inputs are split across the slot's threads.
constexpr size_t kParallelScanFloats = size_t{4} << 20;

template <typename T, bool (*kShare)(const T*, size_t)>
bool AnyAcrossThreads(const T* data, size_t count) {
  if (count < kParallelScanFloats) return kShare(data, count);
  bool any = false;
#pragma omp parallel reduction(|| : any)
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t thread = static_cast<size_t>(omp_get_thread_num());
    const size_t begin = count * thread / threads;
    const size_t end = count * (thread + 1) / threads;
    if (begin < end) any = kShare(data + begin, end - begin);
  }
  return any;
}

class UnlessNonFiniteKernel : public Kernel {
 public:
  UnlessNonFiniteKernel(std::unique_ptr<Kernel> fast, DeferredKernel exact,
                        std::vector<CheckedInput> checked, FiniteOutputs* finite,
                        size_t output_bytes)
      : fast_(std::move(fast)),
        deferred_exact_(std::move(exact)),
        checked_(std::move(checked)),
        finite_(finite),
        output_bytes_(output_bytes) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    for (const CheckedInput& input : checked_) {
      const void* data = inputs[input.index];
      const size_t bytes = input.elements * (input.bfloat16 ? sizeof(uint16_t) : sizeof(float));
      if (input.in_plan && finite_->Holds(data, bytes)) continue;
      if (input.bfloat16 ? AnyNonFiniteBFloat16(static_cast<const uint16_t*>(data), input.elements)
                         : AnyNonFinite(static_cast<const float*>(data), input.elements)) {
        REPLICAD_RETURN_IF_ERROR(BuildExact());
        return exact_->Run(run, inputs, outputs);
      }
    }
    REPLICAD_RETURN_IF_ERROR(fast_->Run(run, inputs, outputs));
    finite_->Record(outputs[0], output_bytes_);
    return absl::OkStatus();
  }
  size_t workspace_bytes() const override {
    return std::max(fast_->workspace_bytes(), deferred_exact_.workspace_bytes);
  }
  void SetWorkspace(void* workspace) override {
    workspace_ = workspace;
    fast_->SetWorkspace(workspace);
    if (exact_ != nullptr) exact_->SetWorkspace(workspace);
  }
  std::string native_output_layout() const override { return fast_->native_output_layout(); }
  size_t native_output_bytes() const override { return fast_->native_output_bytes(); }
  int overwritable_input() const override { return fast_->overwritable_input(); }

 private:
  absl::Status BuildExact() {
    if (exact_ != nullptr) return absl::OkStatus();
    REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> exact, deferred_exact_.build());
    if (exact->workspace_bytes() > deferred_exact_.workspace_bytes) {
      return absl::InternalError(absl::StrCat(
          "the NaN-keeping kernel asks for ", exact->workspace_bytes(),
          " workspace bytes, more than the ", deferred_exact_.workspace_bytes, " planned"));
    }
    exact->SetWorkspace(workspace_);
    exact_ = std::move(exact);
    return absl::OkStatus();
  }

  std::unique_ptr<Kernel> fast_;
  DeferredKernel deferred_exact_;
  std::unique_ptr<Kernel> exact_;  // Built by the first run that needs it.
  void* workspace_ = nullptr;
  std::vector<CheckedInput> checked_;
  FiniteOutputs* finite_;
  size_t output_bytes_;
};

class CountedKernel : public Kernel {
 public:
  CountedKernel(std::unique_ptr<Kernel> inner, FiniteOutputs* finite)
      : inner_(std::move(inner)), finite_(finite) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    ++finite_->kernels_run;
    return inner_->Run(run, inputs, outputs);
  }
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  void SetWorkspace(void* workspace) override { inner_->SetWorkspace(workspace); }
  std::string native_output_layout() const override { return inner_->native_output_layout(); }
  size_t native_output_bytes() const override { return inner_->native_output_bytes(); }
  std::vector<size_t> joined_input_offsets() const override {
    return inner_->joined_input_offsets();
  }
  int overwritable_input() const override { return inner_->overwritable_input(); }

 private:
  std::unique_ptr<Kernel> inner_;
  FiniteOutputs* finite_;
};

bool AnyNaNShare(const float* data, size_t count) {
  if (HasAvx512()) return AnyNaNAvx512(data, count);
  if (HasAvx2()) return AnyNaNAvx2(data, count);
  bool any = false;
  for (size_t i = 0; i < count; ++i) any |= std::isnan(data[i]);
  return any;
}

class NaNRowsKernel : public Kernel {
 public:
  NaNRowsKernel(std::unique_ptr<Kernel> inner, int64_t outer, int64_t axis, int64_t inner_size)
      : inner_(std::move(inner)), outer_(outer), axis_(axis), inner_size_(inner_size) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    absl::Status status = inner_->Run(run, inputs, outputs);
    if (status.ok()) SpreadNaNOverRows(static_cast<float*>(outputs[0]), outer_, axis_, inner_size_);
    return status;
  }
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  void SetWorkspace(void* workspace) override { inner_->SetWorkspace(workspace); }

 private:
  std::unique_ptr<Kernel> inner_;
  int64_t outer_, axis_, inner_size_;
};

}  // namespace

bool AnyNaN(const float* data, size_t count) {
  return AnyAcrossThreads<float, AnyNaNShare>(data, count);
}

bool AnyNonFinite(const float* data, size_t count) {
  return AnyAcrossThreads<float, AnyNonFiniteShare>(data, count);
}

bool AnyNonFiniteBFloat16(const uint16_t* data, size_t count) {
  return AnyAcrossThreads<uint16_t, AnyNonFiniteBFloat16Share>(data, count);
}

std::unique_ptr<Kernel> UnlessNonFinite(std::unique_ptr<Kernel> fast, DeferredKernel exact,
                                        std::vector<CheckedInput> checked, FiniteOutputs* finite,
                                        size_t output_bytes) {
  return std::make_unique<UnlessNonFiniteKernel>(std::move(fast), std::move(exact),
                                                 std::move(checked), finite, output_bytes);
}

std::unique_ptr<Kernel> CountedIn(std::unique_ptr<Kernel> inner, FiniteOutputs* finite) {
  return std::make_unique<CountedKernel>(std::move(inner), finite);
}

void SpreadNaNOverRows(float* data, int64_t outer, int64_t axis, int64_t inner) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t o = 0; o < outer; ++o) {
    float* block = data + o * axis * inner;
    if (inner == 1) {
      if (AnyNaNShare(block, static_cast<size_t>(axis))) std::fill(block, block + axis, nan);
      continue;
    }
    for (int64_t i = 0; i < inner; ++i) {
      bool any = false;
      for (int64_t a = 0; a < axis; ++a) any |= std::isnan(block[a * inner + i]);
      for (int64_t a = 0; any && a < axis; ++a) block[a * inner + i] = nan;
    }
  }
}

std::unique_ptr<Kernel> WithNaNRows(std::unique_ptr<Kernel> inner, int64_t outer, int64_t axis,
                                    int64_t inner_size) {
  return std::make_unique<NaNRowsKernel>(std::move(inner), outer, axis, inner_size);
}

}  // namespace replicad
