#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_ELEMENTWISE_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_ELEMENTWISE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "core/ops/fused_activation.h"

namespace replicad {

// Internal to the CUDA kernels: launchers of our own element-wise device
// kernels (elementwise.cu), for the kernel builders. Each enqueues on
// `stream` and returns at once; pointers are device memory; `n` counts
// elements. A launcher with n == 0 launches nothing. Launch errors are read
// with LastLaunchStatus (cuda_call.h).

enum class CudaUnaryOp {
  kIdentity,
  kRelu,
  kLeakyRelu,
  kClip,
  kSigmoid,
  kTanh,
  kHardSigmoid,
  kHardSwish,
  kSwish,  // x * sigmoid(alpha * x); only as a Conv's or Gemm's fused activation.
  kGelu,   // x / 2 * (1 + erf(x / sqrt(2))): Gelu (approximate none), fused or not.
  kSqrt,
  kErf,
  // Element-wise math of float32 tensors (the CPU's semantics: Round to
  // nearest, ties to even; Elu's alpha; Selu's alpha and gamma in beta).
  kAbs,
  kNeg,
  kExp,
  kLog,
  kReciprocal,
  kFloor,
  kCeil,
  kRound,
  kSoftplus,
  kMish,
  kElu,
  kSelu,
  kScale,  // alpha * x (Mean's 1 / inputs).
};

struct CudaUnary {
  CudaUnaryOp op = CudaUnaryOp::kIdentity;
  float alpha = 0;  // LeakyRelu's slope, Clip's lower bound, HardSigmoid's and Swish's alpha.
  float beta = 0;   // Clip's upper bound, HardSigmoid's beta, Selu's gamma.
};

// A Conv's or Gemm's fused activation as a CudaUnary (kIdentity for none);
// InvalidArgument for an activation this backend cannot apply.
absl::StatusOr<CudaUnary> FusedUnary(const std::optional<FusedActivation>& activation);

// out[i] = f(in[i]); in == out is allowed.
void LaunchUnary(const float* in, float* out, int64_t n, const CudaUnary& f, cudaStream_t stream);

// out[i] = f(out[i] + addend[i]): a Conv's fused residual sum, then its activation.
void LaunchAddUnary(float* out, const float* addend, int64_t n, const CudaUnary& f,
                    cudaStream_t stream);

// Broadcasting over at most kMaxRank dims. Shapes are the output's, padded
// on the left to kMaxRank with 1s; an input's strides are in elements, 0
// along dims it broadcasts.
inline constexpr int kMaxRank = 8;
struct BroadcastIndex {
  // Plain arrays: device code indexes them (std::array's operator[] is host-only).
  int64_t out_dims[kMaxRank] = {1, 1, 1, 1, 1, 1, 1, 1};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};

// kMax and kMin give NaN where either side is NaN (as the CPU, numpy and
// ONNX Runtime); kPRelu is a where a >= 0 (or NaN), b * a below. kMod and
// kFmod are the CPU's Mod: floats C's fmod either way; integers take the
// divisor's sign (Python's %) or, kFmod, the dividend's, and a zero divisor
// or INT64_MIN % -1 gives 0.
enum class CudaBinaryOp { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kPRelu, kMod, kFmod };

// out = a op b with broadcasting, float32.
void LaunchBinary(const float* a, const float* b, float* out, int64_t n, CudaBinaryOp op,
                  const BroadcastIndex& index, cudaStream_t stream);
// The same for int64 (Div truncates toward zero, as ONNX's integer Div).
void LaunchBinary(const int64_t* a, const int64_t* b, int64_t* out, int64_t n, CudaBinaryOp op,
                  const BroadcastIndex& index, cudaStream_t stream);
// out[i] = a[broadcast index of i]: copies `a` broadcast to the output shape
// (b_strides unused). Serves Expand and Gemm's bias C.
void LaunchBroadcastCopy(const float* a, float* out, int64_t n, const BroadcastIndex& index,
                         cudaStream_t stream);

// out[i] = (float)in[i] and out[i] = (int64)in[i] (truncation toward zero, as
// a C cast; the CPU backend does the same).
void LaunchCast(const int64_t* in, float* out, int64_t n, cudaStream_t stream);
void LaunchCast(const float* in, int64_t* out, int64_t n, cudaStream_t stream);
// float16 (bfloat16 when `bfloat16`) bit patterns to float32, exact, and
// float32 to them rounded to nearest even (CUDA's __float2half_rn and
// __float2bfloat16_rn, as core/tensor/half_float.h on the host).
void LaunchHalfToFloat(const uint16_t* in, float* out, int64_t n, bool bfloat16,
                       cudaStream_t stream);
void LaunchFloatToHalf(const float* in, uint16_t* out, int64_t n, bool bfloat16,
                       cudaStream_t stream);

// The float32 pass after a 16-bit convolution (cudnn_conv16_kernel.cc):
// out[i] = f(y[i] + bias[c] + addend[i]) over NCHW values, c = (i / spatial)
// % channels, each term read in its own type and the sum rounded once into
// out's. 16-bit values are float16 bits (bfloat16 where `bfloat16`); `out`
// may be `y` (both 16-bit).
struct ConvEpilogue16 {
  const uint16_t* y = nullptr;   // cuDNN's output, 16-bit.
  const float* bias = nullptr;   // [channels]; null for none.
  const void* addend = nullptr;  // The fused residual; null for none.
  bool addend_16bit = false;
  void* out = nullptr;
  bool out_16bit = false;
  bool bfloat16 = false;
  int64_t n = 0;
  int64_t channels = 1;
  int64_t spatial = 1;
  CudaUnary f;
};
void LaunchConvEpilogue16(const ConvEpilogue16& epilogue, cudaStream_t stream);

// BatchNormalization in inference form on x viewed as [batch, channels,
// spatial]: y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c].
void LaunchBatchNormInference(const float* x, const float* scale, const float* bias,
                              const float* mean, const float* var, float* y, int64_t batch,
                              int64_t channels, int64_t spatial, float epsilon,
                              cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_ELEMENTWISE_LAUNCH_H_
