#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_NON_FINITE_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_NON_FINITE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// Internal to the CPU kernels: what keeps NaN where a oneDNN 2.6 kernel
// computes something else, so that a request with a NaN or an infinity gets
// NaN back where ONNX Runtime and PyTorch give it, never a plausible number.
// (The clamps that oneDNN's relu and clip get wrong are in activation_pass.h.)

// Whether data[0, count) holds a NaN. Vectorized; split across the calling
// slot's OpenMP threads from 4 M floats on (below, on the calling thread).
bool AnyNaN(const float* data, size_t count);

// Whether data[0, count) holds a NaN or an infinity; as AnyNaN.
bool AnyNonFinite(const float* data, size_t count);

// The same for bfloat16 values (their bits).
bool AnyNonFiniteBFloat16(const uint16_t* data, size_t count);

// What a slot's kernels know of finiteness, so that a check need not read
// what the kernel run just before wrote knowing it finite (a convolution's
// fast form, given finite inputs and weights, writes no NaN or infinity
// short of overflow): MakeCpuKernel's kernels count themselves as they
// start, and a kernel records the output it knows finite. One per slot
// (CpuKernelContext), used on its stream thread only.
struct FiniteOutputs {
  uint64_t kernels_run = 0;
  const void* data = nullptr;  // Written all finite by kernel number `written_by`.
  size_t bytes = 0;
  uint64_t written_by = 0;

  // Whether [p, p + n) is exactly what the kernel run just before the
  // current one wrote knowing it finite. Trust it only for an input that a
  // kernel of the same plan wrote (one in a native layout): a request's
  // input may sit where an earlier run's output was.
  bool Holds(const void* p, size_t n) const {
    return data == p && bytes == n && written_by + 1 == kernels_run;
  }
  void Record(const void* p, size_t n) {
    data = p;
    bytes = n;
    written_by = kernels_run;
  }
};

// The exact kernel of UnlessNonFinite, built on the first request that
// needs it rather than with the plan: requests with a NaN or an infinity
// are rare, and a convolution's exact kernel holds weights of its own (a
// Winograd convolution's direct form: another copy of its 3x3 weights,
// 36-38 MiB of resnet18's daemon, RESULTS.md). `build` runs on the slot's stream thread,
// inside Run, and must give a kernel that asks for at most
// `workspace_bytes` of workspace, the same native output and
// overwritable_input as the fast kernel (the caller builds it once with the
// plan to learn them).
struct DeferredKernel {
  std::function<absl::StatusOr<std::unique_ptr<Kernel>>()> build;
  size_t workspace_bytes = 0;
};

// A kernel that runs `fast` where every input of `checked` holds only
// finite values, else `exact`, and records its output 0 (`output_bytes`)
// as finite after `fast`. For a convolution with a fused clamp: oneDNN's
// post-op (fast) equals our clamp pass (exact) except where the
// convolution's sum is NaN, which needs a NaN or an infinity in its inputs
// (constant weights are checked when the plan is made). An input is read
// (vectorized) unless `finite` holds it and it is `in_plan` (see
// FiniteOutputs). The exact kernel is built by the first run that needs it
// (that run allocates, and answers the build's error if it fails); both
// share the workspace, sized for the larger.
struct CheckedInput {
  int index;
  size_t elements;
  bool in_plan;           // Written by a kernel of the same plan (a native layout).
  bool bfloat16 = false;  // Float32 values, or (written so by a bf16 convolution) bfloat16.
};
std::unique_ptr<Kernel> UnlessNonFinite(std::unique_ptr<Kernel> fast, DeferredKernel exact,
                                        std::vector<CheckedInput> checked, FiniteOutputs* finite,
                                        size_t output_bytes);

// `inner`, counting itself in `finite` as it starts (MakeCpuKernel wraps
// every kernel so).
std::unique_ptr<Kernel> CountedIn(std::unique_ptr<Kernel> inner, FiniteOutputs* finite);

// For a softmax's output, [outer, axis, inner] row-major: every one of the
// outer x inner rows along the middle dim that holds a NaN becomes NaN
// throughout. oneDNN's softmax and log-softmax give NaN only where the
// input's NaN or +inf was (0 elsewhere in the row); ONNX Runtime gives NaN
// for the whole row, which has no meaningful distribution.
void SpreadNaNOverRows(float* data, int64_t outer, int64_t axis, int64_t inner);

// `inner`, then SpreadNaNOverRows over its output 0.
std::unique_ptr<Kernel> WithNaNRows(std::unique_ptr<Kernel> inner, int64_t outer, int64_t axis,
                                    int64_t inner_size);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_NON_FINITE_H_
