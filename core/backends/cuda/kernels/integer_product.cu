#include <cstdint>

#include "core/backends/cuda/kernels/integer_product_launch.h"
#include "core/backends/cuda/kernels/integer_sum.cuh"

namespace replicad {
namespace {

// A block computes a kTileM x kTileN tile of one output matrix, stepping
// through K kTileK at a time with both operand tiles in shared memory; its
// 16 x 16 threads hold 4 x 4 sums each, strided by 16 so that a warp reads
// shared memory without bank conflicts.
constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileK = 16;
constexpr int kGemmThreads = 256;
constexpr int kPerThread = 4;  // Rows and columns of sums per thread.
constexpr int64_t kMaxGridDim = 65535;

__device__ int32_t ZeroPointAt(const void* zero_points, bool is_signed, int64_t index) {
  return zero_points == nullptr ? 0 : EightBitAt(zero_points, is_signed, index);
}

// MatMulInteger and QLinearMatMul as the product's operands: Left is A's
// row-major matrix, Right B's, output channels are B's columns.
struct MatMulOperands {
  const void* a;
  const void* b;
  void* y;
  IntegerMatMulShape shape;
  DeviceProduct p;

  __device__ int64_t batches() const { return shape.batches; }
  __device__ int64_t rows() const { return shape.m; }
  __device__ int64_t cols() const { return shape.n; }
  __device__ int64_t depth() const { return shape.k; }
  __device__ int32_t Left(int64_t batch, int64_t row, int64_t k) const {
    const int64_t matrix = shape.operands[2 * batch];
    return EightBitAt(a, p.a_signed, (matrix * shape.m + row) * shape.k + k) -
           ZeroPointAt(p.a_zero_point, p.a_signed, 0);
  }
  __device__ int32_t Right(int64_t batch, int64_t k, int64_t col) const {
    const int64_t matrix = shape.operands[2 * batch + 1];
    return EightBitAt(b, p.b_signed, (matrix * shape.k + k) * shape.n + col) -
           ZeroPointAt(p.b_zero_point, p.b_signed, p.b_zero_point_per_channel ? col : 0);
  }
  __device__ void Store(int64_t batch, int64_t row, int64_t col, uint32_t sum) const {
    WriteSum(sum, col, (batch * shape.m + row) * shape.n + col, y, p);
  }
};

// ConvInteger and QLinearConv as the product's operands, one matrix per
// (image, group): Left is the group's rows of w [group_outputs, depth],
// Right the im2col columns of x [depth, out_h * out_w], read in place.
struct ConvOperands {
  const void* x;
  const void* w;
  void* y;
  IntegerConvShape shape;
  DeviceProduct p;
  int64_t group_channels;  // channels / group.
  int64_t group_outputs;   // out_channels / group.
  int64_t window;          // kernel_h * kernel_w.
  int64_t positions;       // out_h * out_w.

  __device__ int64_t batches() const { return shape.images * shape.group; }
  __device__ int64_t rows() const { return group_outputs; }
  __device__ int64_t cols() const { return positions; }
  __device__ int64_t depth() const { return group_channels * window; }
  __device__ int32_t Left(int64_t batch, int64_t row, int64_t k) const {
    const int64_t channel = batch % shape.group * group_outputs + row;
    return EightBitAt(w, p.b_signed, channel * depth() + k) -
           ZeroPointAt(p.b_zero_point, p.b_signed, p.b_zero_point_per_channel ? channel : 0);
  }
  __device__ int32_t Right(int64_t batch, int64_t k, int64_t col) const {
    const int64_t image = batch / shape.group, g = batch % shape.group;
    const int64_t c = k / window;
    const int64_t kh = k / shape.kernel_w % shape.kernel_h, kw = k % shape.kernel_w;
    const int64_t h = col / shape.out_w * shape.stride_h - shape.pad_top + kh * shape.dilation_h;
    const int64_t x_w = col % shape.out_w * shape.stride_w - shape.pad_left + kw * shape.dilation_w;
    if (h < 0 || h >= shape.height || x_w < 0 || x_w >= shape.width) return 0;
    const int64_t plane = image * shape.channels + g * group_channels + c;
    return EightBitAt(x, p.a_signed, (plane * shape.height + h) * shape.width + x_w) -
           ZeroPointAt(p.a_zero_point, p.a_signed, 0);
  }
  __device__ void Store(int64_t batch, int64_t row, int64_t col, uint32_t sum) const {
    const int64_t image = batch / shape.group;
    const int64_t channel = batch % shape.group * group_outputs + row;
    WriteSum(sum, channel, (image * shape.out_channels + channel) * positions + col, y, p);
  }
};

// Sums are kept as uint32: the CPU's int32 bits, in any order, and a
// wrap-around past int32's range rather than undefined behaviour.
template <typename Operands>
__global__ void __launch_bounds__(kGemmThreads) IntegerGemmKernel(Operands o) {
  __shared__ int32_t left[kTileK][kTileM + 1];
  __shared__ int32_t right[kTileK][kTileN];
  const int tx = threadIdx.x % (kTileN / kPerThread);
  const int ty = threadIdx.x / (kTileN / kPerThread);
  const int64_t rows = o.rows(), cols = o.cols(), depth = o.depth();
  const int64_t row_tiles = (rows + kTileM - 1) / kTileM;
  const int64_t col_tiles = (cols + kTileN - 1) / kTileN;
  for (int64_t batch = blockIdx.z; batch < o.batches(); batch += gridDim.z) {
    for (int64_t row_tile = blockIdx.y; row_tile < row_tiles; row_tile += gridDim.y) {
      for (int64_t col_tile = blockIdx.x; col_tile < col_tiles; col_tile += gridDim.x) {
        const int64_t row0 = row_tile * kTileM, col0 = col_tile * kTileN;
        uint32_t sums[kPerThread][kPerThread] = {};
        for (int64_t k0 = 0; k0 < depth; k0 += kTileK) {
          for (int e = threadIdx.x; e < kTileM * kTileK; e += kGemmThreads) {
            const int kk = e % kTileK, mm = e / kTileK;
            const int64_t row = row0 + mm, k = k0 + kk;
            left[kk][mm] = row < rows && k < depth ? o.Left(batch, row, k) : 0;
          }
          for (int e = threadIdx.x; e < kTileN * kTileK; e += kGemmThreads) {
            const int nn = e % kTileN, kk = e / kTileN;
            const int64_t col = col0 + nn, k = k0 + kk;
            right[kk][nn] = col < cols && k < depth ? o.Right(batch, k, col) : 0;
          }
          __syncthreads();
#pragma unroll
          for (int kk = 0; kk < kTileK; ++kk) {
            uint32_t l[kPerThread], r[kPerThread];
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
              l[i] = static_cast<uint32_t>(left[kk][ty + i * (kTileM / kPerThread)]);
              r[i] = static_cast<uint32_t>(right[kk][tx + i * (kTileN / kPerThread)]);
            }
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
#pragma unroll
              for (int j = 0; j < kPerThread; ++j) sums[i][j] += l[i] * r[j];
            }
          }
          __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t row = row0 + ty + i * (kTileM / kPerThread);
#pragma unroll
          for (int j = 0; j < kPerThread; ++j) {
            const int64_t col = col0 + tx + j * (kTileN / kPerThread);
            if (row < rows && col < cols) o.Store(batch, row, col, sums[i][j]);
          }
        }
      }
    }
  }
}

int64_t GridDim(int64_t count) { return count < kMaxGridDim ? count : kMaxGridDim; }

template <typename Operands>
void LaunchGemm(const Operands& o, int64_t batches, int64_t rows, int64_t cols,
                cudaStream_t stream) {
  if (batches == 0 || rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>(GridDim((cols + kTileN - 1) / kTileN)),
                  static_cast<unsigned>(GridDim((rows + kTileM - 1) / kTileM)),
                  static_cast<unsigned>(GridDim(batches)));
  IntegerGemmKernel<<<grid, kGemmThreads, 0, stream>>>(o);
}

}  // namespace

void LaunchIntegerMatMul(const void* a, const void* b, void* y, const IntegerMatMulShape& shape,
                         const DeviceProduct& product, cudaStream_t stream) {
  const MatMulOperands o{a, b, y, shape, product};
  LaunchGemm(o, shape.batches, shape.m, shape.n, stream);
}

void LaunchIntegerConv(const void* x, const void* w, void* y, const IntegerConvShape& shape,
                       const DeviceProduct& product, cudaStream_t stream) {
  const ConvOperands o{x,
                       w,
                       y,
                       shape,
                       product,
                       shape.channels / shape.group,
                       shape.out_channels / shape.group,
                       shape.kernel_h * shape.kernel_w,
                       shape.out_h * shape.out_w};
  LaunchGemm(o, shape.images * shape.group, o.group_outputs, o.positions, stream);
}

}  // namespace replicad
