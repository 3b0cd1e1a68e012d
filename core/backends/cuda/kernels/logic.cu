#include <cstdint>

#include "core/backends/cuda/kernels/broadcast_map.cuh"
#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/logic_launch.h"

namespace replicad {
namespace {

template <typename T>
__device__ bool Compare(T a, T b, CudaCompareOp op) {
  switch (op) {
    case CudaCompareOp::kEqual:
      return a == b;
    case CudaCompareOp::kLess:
      return a < b;
    case CudaCompareOp::kLessOrEqual:
      return a <= b;
    case CudaCompareOp::kGreater:
      return a > b;
    case CudaCompareOp::kGreaterOrEqual:
      return a >= b;
  }
  return false;
}

template <typename T>
struct Compared {
  CudaCompareOp op;
  __device__ uint8_t operator()(T a, T b) const { return Compare(a, b, op) ? 1 : 0; }
};
// Bools compare as truth values: any byte but 0 is true, as on the CPU.
template <>
struct Compared<uint8_t> {
  CudaCompareOp op;
  __device__ uint8_t operator()(uint8_t a, uint8_t b) const {
    return Compare<uint8_t>(a != 0, b != 0, op) ? 1 : 0;
  }
};

struct Logic {
  CudaLogicOp op;
  __device__ uint8_t operator()(uint8_t a, uint8_t b) const {
    const bool x = a != 0, y = b != 0;
    if (op == CudaLogicOp::kAnd) return x && y ? 1 : 0;
    if (op == CudaLogicOp::kOr) return x || y ? 1 : 0;
    return x != y ? 1 : 0;
  }
};

__global__ void NotKernel(const uint8_t* in, uint8_t* out, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = in[i] != 0 ? 0 : 1; }
}

template <typename T>
__global__ void WhereKernel(const uint8_t* condition, const T* x, const T* y, T* out, int64_t n,
                            BroadcastIndex condition_x, BroadcastIndex y_index) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t ci, xi, unused, yi;
    BroadcastOffsets(i, condition_x, &ci, &xi);
    BroadcastOffsets(i, y_index, &unused, &yi);
    out[i] = condition[ci] != 0 ? x[xi] : y[yi];
  }
}

template <typename T>
__global__ void ToBoolKernel(const T* in, uint8_t* out, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = in[i] != T{0} ? 1 : 0; }
}

template <typename T>
__global__ void FromBoolKernel(const uint8_t* in, T* out, int64_t n) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { out[i] = in[i] != 0 ? T{1} : T{0}; }
}

template <typename T>
void WhereOn(const uint8_t* condition, const T* x, const T* y, T* out, int64_t n,
             const BroadcastIndex& condition_x, const BroadcastIndex& y_index,
             cudaStream_t stream) {
  if (n == 0) return;
  WhereKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(condition, x, y, out, n, condition_x,
                                                             y_index);
}

}  // namespace

void LaunchCompare(const float* a, const float* b, uint8_t* out, int64_t n, CudaCompareOp op,
                   const BroadcastIndex& index, cudaStream_t stream) {
  LaunchBroadcastMap(a, b, out, n, index, Compared<float>{op}, stream);
}
void LaunchCompare(const int64_t* a, const int64_t* b, uint8_t* out, int64_t n, CudaCompareOp op,
                   const BroadcastIndex& index, cudaStream_t stream) {
  LaunchBroadcastMap(a, b, out, n, index, Compared<int64_t>{op}, stream);
}
void LaunchCompare(const uint8_t* a, const uint8_t* b, uint8_t* out, int64_t n, CudaCompareOp op,
                   const BroadcastIndex& index, cudaStream_t stream) {
  LaunchBroadcastMap(a, b, out, n, index, Compared<uint8_t>{op}, stream);
}

void LaunchLogic(const uint8_t* a, const uint8_t* b, uint8_t* out, int64_t n, CudaLogicOp op,
                 const BroadcastIndex& index, cudaStream_t stream) {
  LaunchBroadcastMap(a, b, out, n, index, Logic{op}, stream);
}

void LaunchNot(const uint8_t* in, uint8_t* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  NotKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}

void LaunchWhere(const uint8_t* condition, const float* x, const float* y, float* out, int64_t n,
                 const BroadcastIndex& condition_x, const BroadcastIndex& y_index,
                 cudaStream_t stream) {
  WhereOn(condition, x, y, out, n, condition_x, y_index, stream);
}
void LaunchWhere(const uint8_t* condition, const int64_t* x, const int64_t* y, int64_t* out,
                 int64_t n, const BroadcastIndex& condition_x, const BroadcastIndex& y_index,
                 cudaStream_t stream) {
  WhereOn(condition, x, y, out, n, condition_x, y_index, stream);
}

void LaunchToBool(const float* in, uint8_t* out, int64_t n, cudaStream_t stream) {
  if (n > 0) ToBoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}
void LaunchToBool(const int64_t* in, uint8_t* out, int64_t n, cudaStream_t stream) {
  if (n > 0) ToBoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}
void LaunchToBool(const uint8_t* in, uint8_t* out, int64_t n, cudaStream_t stream) {
  if (n > 0) ToBoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}
void LaunchFromBool(const uint8_t* in, float* out, int64_t n, cudaStream_t stream) {
  if (n > 0) FromBoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}
void LaunchFromBool(const uint8_t* in, int64_t* out, int64_t n, cudaStream_t stream) {
  if (n > 0) FromBoolKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(in, out, n);
}

}  // namespace replicad
