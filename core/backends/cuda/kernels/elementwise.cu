#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/backends/cuda/kernels/broadcast_map.cuh"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

// log(1 + e^x) without overflow: x itself where e^x dwarfs the 1.
__device__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ float Apply(float x, CudaUnaryOp op, float alpha, float beta) {
  switch (op) {
    case CudaUnaryOp::kIdentity:
      return x;
    case CudaUnaryOp::kRelu:
      return x > 0.0f ? x : 0.0f;
    case CudaUnaryOp::kLeakyRelu:
      return x >= 0.0f ? x : alpha * x;
    case CudaUnaryOp::kClip:
      return fminf(fmaxf(x, alpha), beta);
    case CudaUnaryOp::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case CudaUnaryOp::kTanh:
      return tanhf(x);
    case CudaUnaryOp::kHardSigmoid:
      return fminf(fmaxf(alpha * x + beta, 0.0f), 1.0f);
    case CudaUnaryOp::kHardSwish:
      return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    case CudaUnaryOp::kSwish:
      return x / (1.0f + expf(-alpha * x));
    case CudaUnaryOp::kGelu:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case CudaUnaryOp::kSqrt:
      return sqrtf(x);
    case CudaUnaryOp::kErf:
      return erff(x);
    case CudaUnaryOp::kAbs:
      return fabsf(x);
    case CudaUnaryOp::kNeg:
      return -x;
    case CudaUnaryOp::kExp:
      return expf(x);
    case CudaUnaryOp::kLog:
      return logf(x);
    case CudaUnaryOp::kReciprocal:
      return 1.0f / x;
    case CudaUnaryOp::kFloor:
      return floorf(x);
    case CudaUnaryOp::kCeil:
      return ceilf(x);
    case CudaUnaryOp::kRound:
      return rintf(x);  // Ties to even, as ONNX's Round.
    case CudaUnaryOp::kSoftplus:
      return Softplus(x);
    case CudaUnaryOp::kMish:
      return x * tanhf(Softplus(x));
    case CudaUnaryOp::kElu:
      return x >= 0.0f ? x : alpha * expm1f(x);
    case CudaUnaryOp::kSelu:
      return beta * (x > 0.0f ? x : alpha * expm1f(x));
    case CudaUnaryOp::kScale:
      return alpha * x;
  }
  return x;
}

__global__ void UnaryKernel(const float* in, float* out, int64_t n, CudaUnaryOp op, float alpha,
                            float beta) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = Apply(in[i], op, alpha, beta); }
}

__global__ void AddUnaryKernel(float* out, const float* addend, int64_t n, CudaUnaryOp op,
                               float alpha, float beta) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = Apply(out[i] + addend[i], op, alpha, beta); }
}

// x ^ y: powf for float32; exact for int64, wrapping on overflow as on the
// CPU, and a negative exponent truncates 1 / x^-y toward zero.
__device__ float Power(float x, float y) { return powf(x, y); }

__device__ int64_t Power(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);
  // Unsigned, so overflow wraps instead of being undefined.
  uint64_t result = 1;
  uint64_t base = static_cast<uint64_t>(x);
  for (uint64_t e = static_cast<uint64_t>(y); e != 0; e >>= 1, base *= base) {
    if (e & 1) result *= base;
  }
  return static_cast<int64_t>(result);
}

// Integer division by zero is 0 here and on the CPU (not a trap), and
// INT64_MIN / -1 wraps to INT64_MIN as on the CPU (the division overflows).
__device__ float Quotient(float a, float b) { return a / b; }
__device__ int64_t Quotient(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(a));
  return a / b;
}

// The CPU's Remainder (binary_kernel.cc).
__device__ float Remainder(float a, float b, bool) { return fmodf(a, b); }
__device__ int64_t Remainder(int64_t a, int64_t b, bool fmod) {
  if (b == 0 || b == -1) return 0;
  const int64_t r = a % b;
  if (!fmod && r != 0 && ((r < 0) != (b < 0))) return r + b;
  return r;
}

__device__ bool IsNaN(float x) { return isnan(x); }
__device__ bool IsNaN(int64_t) { return false; }

template <typename T>
__device__ T Combine(T a, T b, CudaBinaryOp op) {
  switch (op) {
    case CudaBinaryOp::kMax:
      if (IsNaN(a) || IsNaN(b)) return IsNaN(a) ? a : b;
      return a < b ? b : a;
    case CudaBinaryOp::kMin:
      if (IsNaN(a) || IsNaN(b)) return IsNaN(a) ? a : b;
      return b < a ? b : a;
    case CudaBinaryOp::kPRelu:
      return a < 0 ? static_cast<T>(b * a) : a;
    case CudaBinaryOp::kMod:
      return Remainder(a, b, false);
    case CudaBinaryOp::kFmod:
      return Remainder(a, b, true);
    case CudaBinaryOp::kAdd:
      return a + b;
    case CudaBinaryOp::kSub:
      return a - b;
    case CudaBinaryOp::kMul:
      return a * b;
    case CudaBinaryOp::kDiv:
      return Quotient(a, b);
    case CudaBinaryOp::kPow:
      return Power(a, b);
  }
  return a;
}

// Combine as a functor for BroadcastMapKernel.
template <typename T>
struct Combined {
  CudaBinaryOp op;
  __device__ T operator()(T a, T b) const { return Combine(a, b, op); }
};

// Equal shapes (the common residual Add) need no index arithmetic.
template <typename T>
__global__ void SameShapeBinaryKernel(const T* a, const T* b, T* out, int64_t n, CudaBinaryOp op) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = Combine(a[i], b[i], op); }
}

__global__ void BroadcastCopyKernel(const float* a, float* out, int64_t n, BroadcastIndex index) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t ai, unused;
    BroadcastOffsets(i, index, &ai, &unused);
    out[i] = a[ai];
  }
}

template <typename From, typename To>
__global__ void CastKernel(const From* in, To* out, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = static_cast<To>(in[i]); }
}

__device__ float SixteenBitToFloat(uint16_t bits, bool bfloat16) {
  return bfloat16 ? __bfloat162float(__ushort_as_bfloat16(bits))
                  : __half2float(__ushort_as_half(bits));
}

__device__ uint16_t FloatToSixteenBit(float value, bool bfloat16) {
  return bfloat16 ? __bfloat16_as_ushort(__float2bfloat16_rn(value))
                  : __half_as_ushort(__float2half_rn(value));
}

__global__ void HalfToFloatKernel(const uint16_t* in, float* out, int64_t n, bool bfloat16) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = SixteenBitToFloat(in[i], bfloat16); }
}

__global__ void FloatToHalfKernel(const float* in, uint16_t* out, int64_t n, bool bfloat16) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = FloatToSixteenBit(in[i], bfloat16); }
}

// One thread reads and writes element i alone, so out may be y.
__global__ void ConvEpilogue16Kernel(ConvEpilogue16 e) {
  REPLICAD_GRID_STRIDE_LOOP(i, e.n) {
    float sum = SixteenBitToFloat(e.y[i], e.bfloat16);
    if (e.bias != nullptr) sum += e.bias[(i / e.spatial) % e.channels];
    if (e.addend != nullptr) {
      sum += e.addend_16bit
                 ? SixteenBitToFloat(static_cast<const uint16_t*>(e.addend)[i], e.bfloat16)
                 : static_cast<const float*>(e.addend)[i];
    }
    const float value = Apply(sum, e.f.op, e.f.alpha, e.f.beta);
    if (e.out_16bit) {
      static_cast<uint16_t*>(e.out)[i] = FloatToSixteenBit(value, e.bfloat16);
    } else {
      static_cast<float*>(e.out)[i] = value;
    }
  }
}

__global__ void BatchNormInferenceKernel(const float* x, const float* scale, const float* bias,
                                         const float* mean, const float* var, float* y, int64_t n,
                                         int64_t channels, int64_t spatial, float epsilon) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = (i / spatial) % channels;
    y[i] = (x[i] - mean[c]) / sqrtf(var[c] + epsilon) * scale[c] + bias[c];
  }
}

bool IsRowMajor(const int64_t* strides, const int64_t* dims) {
  int64_t expected = 1;
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (dims[d] != 1 && strides[d] != expected) return false;
    expected *= dims[d];
  }
  return true;
}

template <typename T>
void LaunchBinaryOf(const T* a, const T* b, T* out, int64_t n, CudaBinaryOp op,
                    const BroadcastIndex& index, cudaStream_t stream) {
  if (n == 0) return;
  if (IsRowMajor(index.a_strides, index.out_dims) && IsRowMajor(index.b_strides, index.out_dims)) {
    SameShapeBinaryKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(a, b, out, n, op);
  } else {
    LaunchBroadcastMap(a, b, out, n, index, Combined<T>{op}, stream);
  }
}

}  // namespace

void LaunchUnary(const float* in, float* out, int64_t n, const CudaUnary& f, cudaStream_t stream) {
  if (n == 0) return;
  UnaryKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n, f.op, f.alpha, f.beta);
}

void LaunchAddUnary(float* out, const float* addend, int64_t n, const CudaUnary& f,
                    cudaStream_t stream) {
  if (n == 0) return;
  AddUnaryKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(out, addend, n, f.op, f.alpha,
                                                                f.beta);
}

void LaunchConvEpilogue16(const ConvEpilogue16& epilogue, cudaStream_t stream) {
  if (epilogue.n == 0) return;
  ConvEpilogue16Kernel<<<BlocksFor(epilogue.n), kThreadsPerBlock, 0, stream>>>(epilogue);
}

void LaunchBinary(const float* a, const float* b, float* out, int64_t n, CudaBinaryOp op,
                  const BroadcastIndex& index, cudaStream_t stream) {
  LaunchBinaryOf(a, b, out, n, op, index, stream);
}

void LaunchBinary(const int64_t* a, const int64_t* b, int64_t* out, int64_t n, CudaBinaryOp op,
                  const BroadcastIndex& index, cudaStream_t stream) {
  LaunchBinaryOf(a, b, out, n, op, index, stream);
}

void LaunchBroadcastCopy(const float* a, float* out, int64_t n, const BroadcastIndex& index,
                         cudaStream_t stream) {
  if (n == 0) return;
  BroadcastCopyKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(a, out, n, index);
}

void LaunchCast(const int64_t* in, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  CastKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}

void LaunchCast(const float* in, int64_t* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  CastKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}

void LaunchHalfToFloat(const uint16_t* in, float* out, int64_t n, bool bfloat16,
                       cudaStream_t stream) {
  if (n == 0) return;
  HalfToFloatKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n, bfloat16);
}

void LaunchFloatToHalf(const float* in, uint16_t* out, int64_t n, bool bfloat16,
                       cudaStream_t stream) {
  if (n == 0) return;
  FloatToHalfKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n, bfloat16);
}

void LaunchBatchNormInference(const float* x, const float* scale, const float* bias,
                              const float* mean, const float* var, float* y, int64_t batch,
                              int64_t channels, int64_t spatial, float epsilon,
                              cudaStream_t stream) {
  const int64_t n = batch * channels * spatial;
  if (n == 0) return;
  BatchNormInferenceKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
      x, scale, bias, mean, var, y, n, channels, spatial, epsilon);
}

}  // namespace replicad
