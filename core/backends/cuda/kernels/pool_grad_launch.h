#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_POOL_GRAD_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_POOL_GRAD_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA kernels: launchers of the pooling gradients
// (pool_grad.cu), for cuda_pool_grad_kernels.cc. Each enqueues on `stream`
// and returns at once; pointers are device memory, row-major float32 unless
// stated. Launch errors are read with LastLaunchStatus (cuda_call.h).
//
// Each dX element is written once, by a thread that adds up the windows
// containing it in the order the CPU kernels add them (row-major over dY),
// with the same float operations: results are deterministic and equal the
// CPU backend's bit for bit.

// A 2-D pooling over `planes` planes (N * C) of X [height, width] into dY
// [out_height, out_width]; index 0 is H, 1 is W. Window (i, j) starts at
// (i * strides[0] - pads_begin[0], j * strides[1] - pads_begin[1]) and reads
// kernel[d] taps dilations[d] apart.
struct PoolGradGeometry {
  int64_t planes = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t out_height = 0;
  int64_t out_width = 0;
  int64_t kernel[2] = {1, 1};
  int64_t strides[2] = {1, 1};
  int64_t dilations[2] = {1, 1};
  int64_t pads_begin[2] = {0, 0};
  int64_t pads_end[2] = {0, 0};
  bool count_include_pad = false;  // Average pooling's divisor only.
};

// MaxPoolGrad, first pass: argmax[e] for each dY element e is the offset
// within its plane of the window's first maximum of X (row-major, ties to
// the first; a NaN met first stays), -1 for a window over padding only.
// `argmax` holds planes * out_height * out_width values.
void LaunchMaxPoolArgmax(const float* x, int64_t* argmax, const PoolGradGeometry& g,
                         cudaStream_t stream);

// MaxPoolGrad, second pass: dx[p, r, c] = sum of dy over the windows of
// plane p whose argmax is (r, c); 0 where none is.
void LaunchMaxPoolGradGather(const float* dy, const int64_t* argmax, float* dx,
                             const PoolGradGeometry& g, cudaStream_t stream);

// AveragePoolGrad (dense windows: dilations must be 1): dx[p, r, c] = sum
// over the windows containing (r, c) of dy / divisor, the divisor counting
// the window's cells inside X, or with count_include_pad its cells within
// the padded extent (not a ceil_mode window's part past pads_end).
void LaunchAveragePoolGrad(const float* dy, float* dx, const PoolGradGeometry& g,
                           cudaStream_t stream);

// GlobalAveragePoolGrad: dx[p * plane_size + i] = dy[p] * scale.
void LaunchGlobalAveragePoolGrad(const float* dy, float* dx, int64_t planes, int64_t plane_size,
                                 float scale, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_POOL_GRAD_LAUNCH_H_
