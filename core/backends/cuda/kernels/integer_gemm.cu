#include <cstdint>

#include "core/backends/cuda/kernels/integer_gemm_launch.h"
#include "core/backends/cuda/kernels/integer_sum.cuh"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

constexpr int kWarp = 32;
constexpr int64_t kMaxGridDim = 65535;

// An 8-bit value as int8: uint8 less 128.
__device__ int32_t ShiftedAt(const void* values, bool is_signed, int64_t index) {
  const int32_t v = EightBitAt(values, is_signed, index);
  return is_signed ? v : v - 128;
}

// A zero point (nullptr: 0) as int8.
__device__ int32_t ShiftedZeroPoint(const void* zero_point, bool is_signed) {
  if (zero_point == nullptr) return is_signed ? 0 : -128;
  return ShiftedAt(zero_point, is_signed, 0);
}

// MatMul's A, row by row: a row's values lie at row * depth.
struct RowsSource {
  const void* a;
  bool is_signed;
  int64_t first_row;
  int64_t depth;

  struct Row {
    int64_t start;
  };
  __device__ Row At(int64_t row) const { return {(first_row + row) * depth}; }
  __device__ int32_t Shifted(const Row& row, int32_t k) const {
    return ShiftedAt(a, is_signed, row.start + k);
  }
};

// A convolution's im2col rows: a row is an output position, whose window's
// top-left corner is worked out once per row; k's channel and tap per value
// in 32 bits (an image's sizes are below 2^31; checked where planned).
struct PatchesSource {
  const void* x;
  bool is_signed;
  const void* zero_point;
  IntegerConvShape shape;
  int64_t first_image;
  int64_t positions;
  int32_t window;  // kernel_h * kernel_w.

  struct Row {
    int64_t image_start;  // Where the row's image starts in x.
    int32_t top, left;    // The window's first row and column (may be padding).
    int32_t padding;      // What a position in the padding reads: x's zero point, shifted.
  };
  __device__ Row At(int64_t row) const {
    const int64_t image = first_image + row / positions;
    const int64_t position = row % positions;
    return {image * shape.channels * shape.height * shape.width,
            static_cast<int32_t>(position / shape.out_w * shape.stride_h - shape.pad_top),
            static_cast<int32_t>(position % shape.out_w * shape.stride_w - shape.pad_left),
            ShiftedZeroPoint(zero_point, is_signed)};
  }
  __device__ int32_t Shifted(const Row& row, int32_t k) const {
    const int32_t channel = k / window;
    const int32_t tap = k - channel * window;
    const int32_t kh = tap / static_cast<int32_t>(shape.kernel_w);
    const int32_t kw = tap - kh * static_cast<int32_t>(shape.kernel_w);
    const int32_t h = row.top + kh * static_cast<int32_t>(shape.dilation_h);
    const int32_t w = row.left + kw * static_cast<int32_t>(shape.dilation_w);
    if (h < 0 || h >= shape.height || w < 0 || w >= shape.width) return row.padding;
    return ShiftedAt(x, is_signed,
                     row.image_start + (channel * shape.height + h) * shape.width + w);
  }
};

// One warp per packed row, each lane four values at a time (padded_depth is
// a multiple of 16, so the words are aligned), the row's sum reduced across
// the warp. Whole warps loop together, so the shuffles see every lane.
template <typename Source>
__global__ void PackKernel(Source source, PackedRows packed) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
       row < packed.padded_rows; row += warps) {
    uint32_t* out = reinterpret_cast<uint32_t*>(packed.values + row * packed.padded_depth);
    const bool real = row < packed.rows;
    const typename Source::Row at = real ? source.At(row) : typename Source::Row{};
    uint32_t sum = 0;
    for (int64_t k0 = lane * 4; k0 < packed.padded_depth; k0 += kWarp * 4) {
      uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t k = k0 + i;
        const int32_t v =
            real && k < packed.depth ? source.Shifted(at, static_cast<int32_t>(k)) : 0;
        word |= (static_cast<uint32_t>(v) & 0xffu) << (8 * i);
        sum += static_cast<uint32_t>(v);
      }
      out[k0 / 4] = word;
    }
    if (packed.row_sums != nullptr && real) {
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
      }
      if (lane == 0) packed.row_sums[row] = static_cast<int32_t>(sum);
    }
  }
}

template <typename Source>
void LaunchPack(const Source& source, const PackedRows& packed, cudaStream_t stream) {
  if (packed.padded_rows == 0 || packed.padded_depth == 0) return;
  const int64_t threads = packed.padded_rows * kWarp;
  const int64_t blocks = (threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  PackKernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kThreadsPerBlock,
               0, stream>>>(source, packed);
}

// `za`: A's zero point shifted, read once per thread (ShiftedZeroPoint).
__device__ uint32_t SumAt(const RawIntegerSums& sums, int32_t za, int64_t row, int64_t channel) {
  IntegerSumTerms terms;
  terms.bias = sums.biases[channel];
  terms.weight_sum = sums.weight_sums[channel];
  terms.weight_zero_point = sums.weight_zero_points[channel];
  terms.row_sum = sums.row_sums != nullptr ? sums.row_sums[row] : 0;
  terms.activation_zero_point = za;
  terms.depth = sums.depth;
  return CorrectedIntegerSum(sums.raw[row * sums.ldc + channel], terms);
}

__global__ void RowsOutKernel(RawIntegerSums sums, int64_t rows, int64_t channels,
                              int64_t first_row, void* y, DeviceProduct p) {
  const int32_t za = ShiftedZeroPoint(sums.activation_zero_point, sums.activation_signed);
  REPLICAD_GRID_STRIDE_LOOP(i, rows * channels) {
    const int64_t row = i / channels, channel = i % channels;
    WriteSum(SumAt(sums, za, row, channel), channel, (first_row + row) * channels + channel, y, p);
  }
}

// A block moves a kTile x kTile tile of one image: read along the channels
// (raw's rows), written along the positions (y's rows).
constexpr int kTile = 32;
constexpr int kTileRows = 8;

__global__ void ImagesOutKernel(RawIntegerSums sums, int64_t images, int64_t channels,
                                int64_t positions, int64_t first_image, void* y, DeviceProduct p) {
  __shared__ uint32_t tile[kTile][kTile + 1];
  const int64_t position0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t channel0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int32_t za = ShiftedZeroPoint(sums.activation_zero_point, sums.activation_signed);
  for (int64_t image = blockIdx.z; image < images; image += gridDim.z) {
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t position = position0 + i, channel = channel0 + threadIdx.x;
      if (position < positions && channel < channels) {
        tile[i][threadIdx.x] = SumAt(sums, za, image * positions + position, channel);
      }
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t channel = channel0 + i, position = position0 + threadIdx.x;
      if (position < positions && channel < channels) {
        WriteSum(tile[threadIdx.x][i], channel,
                 ((first_image + image) * channels + channel) * positions + position, y, p);
      }
    }
    __syncthreads();
  }
}

int64_t GridDim(int64_t count) { return count < kMaxGridDim ? count : kMaxGridDim; }

}  // namespace

void LaunchPackIntegerRows(const void* a, bool a_signed, int64_t first_row,
                           const PackedRows& packed, cudaStream_t stream) {
  LaunchPack(RowsSource{a, a_signed, first_row, packed.depth}, packed, stream);
}

void LaunchPackIntegerPatches(const void* x, bool x_signed, const void* x_zero_point,
                              const IntegerConvShape& shape, int64_t first_image,
                              const PackedRows& packed, cudaStream_t stream) {
  const PatchesSource source{x,
                             x_signed,
                             x_zero_point,
                             shape,
                             first_image,
                             shape.out_h * shape.out_w,
                             static_cast<int32_t>(shape.kernel_h * shape.kernel_w)};
  LaunchPack(source, packed, stream);
}

void LaunchIntegerRowsOut(const RawIntegerSums& sums, int64_t rows, int64_t channels,
                          int64_t first_row, void* y, const DeviceProduct& product,
                          cudaStream_t stream) {
  const int64_t n = rows * channels;
  if (n == 0) return;
  RowsOutKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(sums, rows, channels, first_row, y,
                                                               product);
}

void LaunchIntegerImagesOut(const RawIntegerSums& sums, int64_t images, int64_t channels,
                            int64_t positions, int64_t first_image, void* y,
                            const DeviceProduct& product, cudaStream_t stream) {
  if (images == 0 || channels == 0 || positions == 0) return;
  const dim3 grid(static_cast<unsigned>((positions + kTile - 1) / kTile),
                  static_cast<unsigned>((channels + kTile - 1) / kTile),
                  static_cast<unsigned>(GridDim(images)));
  ImagesOutKernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(sums, images, channels, positions,
                                                               first_image, y, product);
}

}  // namespace replicad
