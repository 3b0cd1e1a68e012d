#include <cstdint>

#include "core/backends/cuda/kernels/batch_norm_train_launch.h"
#include "core/backends/cuda/kernels/launch_config.cuh"

namespace replicad {
namespace {

// The per-element and per-channel arithmetic uses the explicitly rounded
// intrinsics (__dmul_rn, __dadd_rn, __dsub_rn), which nvcc never contracts
// into fused multiply-adds, so each step rounds as the CPU kernel's does and
// the same sums give the same bits on both backends.

static_assert((kThreadsPerBlock & (kThreadsPerBlock - 1)) == 0,
              "the block reductions halve the block");

// Adds first[] and second[] (kThreadsPerBlock values each, shared memory)
// into their element 0, pairing the same elements on every run.
__device__ void ReduceBlock(double* first, double* second) {
  for (int half = kThreadsPerBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      first[threadIdx.x] += first[threadIdx.x + half];
      second[threadIdx.x] += second[threadIdx.x + half];
    }
    __syncthreads();
  }
}

// Walks elements [first, end) of channel `c` in a [batch, channels,
// spatial] tensor a block at a time: the thread's element j of the channel
// (j = n * spatial + s) advances by kThreadsPerBlock without dividing per
// element.
struct ChannelWalk {
  int64_t j, n, s, n_step, s_step, channels, spatial, c;

  __device__ ChannelWalk(int64_t channels_in, int64_t spatial_in, int64_t c_in, int64_t first)
      : j(first),
        n(first / spatial_in),
        s(first % spatial_in),
        n_step(kThreadsPerBlock / spatial_in),
        s_step(kThreadsPerBlock % spatial_in),
        channels(channels_in),
        spatial(spatial_in),
        c(c_in) {}

  __device__ int64_t index() const { return (n * channels + c) * spatial + s; }
  __device__ void Next() {
    j += kThreadsPerBlock;
    n += n_step;
    s += s_step;
    if (s >= spatial) {  // s_step < spatial, so once is enough.
      s -= spatial;
      ++n;
    }
  }
};

// The part of a channel's `per_channel` elements that block (c, part) sums:
// part blockIdx.y of gridDim.y, each `part_size` elements; the thread starts
// at its own offset within it.
struct ChannelPart {
  int64_t first, end;
  __device__ ChannelPart(int64_t per_channel, int64_t part_size)
      : first(blockIdx.y * part_size + threadIdx.x),
        end(per_channel < static_cast<int64_t>(blockIdx.y + 1) * part_size
                ? per_channel
                : static_cast<int64_t>(blockIdx.y + 1) * part_size) {}
};

// A block per (channel blockIdx.x, part blockIdx.y): a channel's elements
// are split over several blocks, so the few channels of a large early layer
// (64 channels of 1.6 M elements in resnet50 at batch 128) still fill the
// GPU. Each block's two sums go to partials[(2 part) C + c] and
// partials[(2 part + 1) C + c]; FinishSumsKernel adds the parts in order.
__global__ void SumsKernel(const float* x, int64_t per_channel, int64_t channels, int64_t spatial,
                           int64_t part_size, double* partials) {
  __shared__ double sum[kThreadsPerBlock];
  __shared__ double sum_sq[kThreadsPerBlock];
  const int64_t c = blockIdx.x;
  const ChannelPart part(per_channel, part_size);
  double a = 0.0, b = 0.0;
  for (ChannelWalk w(channels, spatial, c, part.first); w.j < part.end; w.Next()) {
    const double v = x[w.index()];
    a += v;
    b += __dmul_rn(v, v);
  }
  sum[threadIdx.x] = a;
  sum_sq[threadIdx.x] = b;
  __syncthreads();
  ReduceBlock(sum, sum_sq);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.y * channels + c] = sum[0];
    partials[(2 * blockIdx.y + 1) * channels + c] = sum_sq[0];
  }
}

__global__ void GradSumsKernel(const float* x, const float* dy, const float* mean,
                               const float* invstd, int64_t per_channel, int64_t channels,
                               int64_t spatial, int64_t part_size, double* partials) {
  __shared__ double sum_dy[kThreadsPerBlock];
  __shared__ double sum_dy_xhat[kThreadsPerBlock];
  const int64_t c = blockIdx.x;
  const ChannelPart part(per_channel, part_size);
  const double m = mean[c], k = invstd[c];
  double a = 0.0, b = 0.0;
  for (ChannelWalk w(channels, spatial, c, part.first); w.j < part.end; w.Next()) {
    const int64_t i = w.index();
    const double g = dy[i];
    a += g;
    b += __dmul_rn(__dmul_rn(g, __dsub_rn(static_cast<double>(x[i]), m)), k);
  }
  sum_dy[threadIdx.x] = a;
  sum_dy_xhat[threadIdx.x] = b;
  __syncthreads();
  ReduceBlock(sum_dy, sum_dy_xhat);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.y * channels + c] = sum_dy[0];
    partials[(2 * blockIdx.y + 1) * channels + c] = sum_dy_xhat[0];
  }
}

// sums[c] and sums[C + c]: the parts' partial sums added in part order (so
// a shape always adds alike); with `as_floats`, also rounded to float into
// first_float[c] and second_float[c] (BatchNormGrad's dbias and dscale).
__global__ void FinishSumsKernel(const double* partials, int64_t parts, int64_t channels,
                                 double* sums, float* first_float, float* second_float) {
  REPLICAD_GRID_STRIDE_LOOP(c, channels) {
    double a = 0.0, b = 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      a += partials[2 * p * channels + c];
      b += partials[(2 * p + 1) * channels + c];
    }
    sums[c] = a;
    sums[channels + c] = b;
    if (first_float != nullptr) {
      first_float[c] = static_cast<float>(a);
      second_float[c] = static_cast<float>(b);
    }
  }
}

__global__ void TrainStatisticsKernel(double* sums, int64_t channels, double count, double epsilon,
                                      double momentum, const float* scale, const float* bias,
                                      const float* running_mean, const float* running_var,
                                      float* saved_mean, float* saved_invstd, float* new_mean,
                                      float* new_var) {
  REPLICAD_GRID_STRIDE_LOOP(c, channels) {
    const double mean = sums[c] / count;
    const double raw_var = __dsub_rn(sums[channels + c] / count, __dmul_rn(mean, mean));
    // std::max(0.0, raw_var) as the CPU writes it: 0 for NaN too.
    const double var = 0.0 < raw_var ? raw_var : 0.0;
    const double invstd = 1.0 / sqrt(__dadd_rn(var, epsilon));
    saved_mean[c] = static_cast<float>(mean);
    saved_invstd[c] = static_cast<float>(invstd);
    const double unbiased = count > 1 ? __dmul_rn(var, count) / (count - 1) : var;
    const double keep = momentum, take = 1.0 - momentum;
    new_mean[c] = static_cast<float>(
        __dadd_rn(__dmul_rn(keep, static_cast<double>(running_mean[c])), __dmul_rn(take, mean)));
    new_var[c] = static_cast<float>(
        __dadd_rn(__dmul_rn(keep, static_cast<double>(running_var[c])), __dmul_rn(take, unbiased)));
    const double a = __dmul_rn(static_cast<double>(scale[c]), invstd);
    sums[c] = a;
    sums[channels + c] = __dsub_rn(static_cast<double>(bias[c]), __dmul_rn(mean, a));
  }
}

__global__ void GradCoefficientsKernel(double* sums, int64_t channels, double count,
                                       const float* scale, const float* invstd) {
  REPLICAD_GRID_STRIDE_LOOP(c, channels) {
    sums[c] = sums[c] / count;
    sums[channels + c] = sums[channels + c] / count;
    sums[2 * channels + c] =
        __dmul_rn(static_cast<double>(scale[c]), static_cast<double>(invstd[c]));
  }
}

// The channel of element i; in 32 bits where every index fits, which is
// much cheaper than a 64-bit division.
template <bool kNarrow>
__device__ __forceinline__ int64_t ChannelOf(int64_t i, int64_t channels, int64_t spatial) {
  if (kNarrow) {
    return static_cast<uint32_t>(i) / static_cast<uint32_t>(spatial) %
           static_cast<uint32_t>(channels);
  }
  return i / spatial % channels;
}

template <bool kNarrow>
__global__ void ApplyKernel(const float* x, const double* affine, float* y, int64_t n,
                            int64_t channels, int64_t spatial) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = ChannelOf<kNarrow>(i, channels, spatial);
    y[i] = static_cast<float>(
        __dadd_rn(__dmul_rn(static_cast<double>(x[i]), affine[c]), affine[channels + c]));
  }
}

template <bool kNarrow>
__global__ void GradInputKernel(const float* x, const float* dy, const float* mean,
                                const float* invstd, const double* coefficients, float* dx,
                                int64_t n, int64_t channels, int64_t spatial) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = ChannelOf<kNarrow>(i, channels, spatial);
    const double xhat =
        __dmul_rn(__dsub_rn(static_cast<double>(x[i]), static_cast<double>(mean[c])),
                  static_cast<double>(invstd[c]));
    const double centred = __dsub_rn(__dsub_rn(static_cast<double>(dy[i]), coefficients[c]),
                                     __dmul_rn(xhat, coefficients[channels + c]));
    dx[i] = static_cast<float>(__dmul_rn(coefficients[2 * channels + c], centred));
  }
}

bool Narrow(int64_t n) { return n <= static_cast<int64_t>(UINT32_MAX); }

// A channel with no elements (batch or spatial 0) sums to 0, as on the CPU;
// its walk must not divide by a spatial extent of 0.
int64_t RowsToSum(int64_t batch, int64_t spatial) { return spatial == 0 ? 0 : batch; }
int64_t SpatialToWalk(int64_t spatial) { return spatial == 0 ? 1 : spatial; }

// How many blocks sum one channel: enough for about kSumBlocks blocks in
// all (a few per SM of an H100's 132), each part at least kMinPartElements
// elements (16 per thread), at most kMaxParts.
constexpr int64_t kSumBlocks = 4096;
constexpr int64_t kMinPartElements = 16 * kThreadsPerBlock;
constexpr int64_t kMaxParts = 64;

int64_t SumParts(int64_t channels, int64_t per_channel) {
  const int64_t for_blocks = (kSumBlocks + channels - 1) / channels;
  const int64_t for_elements = (per_channel + kMinPartElements - 1) / kMinPartElements;
  const int64_t parts = for_blocks < for_elements ? for_blocks : for_elements;
  return parts < 1 ? 1 : (parts > kMaxParts ? kMaxParts : parts);
}

int64_t PartSize(int64_t per_channel, int64_t parts) { return (per_channel + parts - 1) / parts; }

}  // namespace

int64_t BatchNormSumsScratch(int64_t batch, int64_t channels, int64_t spatial) {
  if (channels == 0) return 0;
  return 2 * channels * SumParts(channels, RowsToSum(batch, spatial) * SpatialToWalk(spatial));
}

void LaunchBatchNormSums(const float* x, int64_t batch, int64_t channels, int64_t spatial,
                         double* sums, double* scratch, cudaStream_t stream) {
  if (channels == 0) return;
  const int64_t per_channel = RowsToSum(batch, spatial) * SpatialToWalk(spatial);
  const int64_t parts = SumParts(channels, per_channel);
  SumsKernel<<<dim3(static_cast<unsigned>(channels), static_cast<unsigned>(parts)),
               kThreadsPerBlock, 0, stream>>>(x, per_channel, channels, SpatialToWalk(spatial),
                                              PartSize(per_channel, parts), scratch);
  FinishSumsKernel<<<BlocksFor(channels), kThreadsPerBlock, 0, stream>>>(scratch, parts, channels,
                                                                         sums, nullptr, nullptr);
}

void LaunchBatchNormTrainStatistics(double* sums, int64_t channels, double count, double epsilon,
                                    double momentum, const float* scale, const float* bias,
                                    const float* running_mean, const float* running_var,
                                    float* saved_mean, float* saved_invstd, float* new_mean,
                                    float* new_var, cudaStream_t stream) {
  if (channels == 0) return;
  TrainStatisticsKernel<<<BlocksFor(channels), kThreadsPerBlock, 0, stream>>>(
      sums, channels, count, epsilon, momentum, scale, bias, running_mean, running_var, saved_mean,
      saved_invstd, new_mean, new_var);
}

void LaunchBatchNormApply(const float* x, const double* affine, float* y, int64_t batch,
                          int64_t channels, int64_t spatial, cudaStream_t stream) {
  const int64_t n = batch * channels * spatial;
  if (n == 0) return;
  if (Narrow(n)) {
    ApplyKernel<true>
        <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, affine, y, n, channels, spatial);
  } else {
    ApplyKernel<false>
        <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, affine, y, n, channels, spatial);
  }
}

void LaunchBatchNormGradSums(const float* x, const float* dy, const float* mean,
                             const float* invstd, int64_t batch, int64_t channels, int64_t spatial,
                             double* sums, double* scratch, float* dscale, float* dbias,
                             cudaStream_t stream) {
  if (channels == 0) return;
  const int64_t per_channel = RowsToSum(batch, spatial) * SpatialToWalk(spatial);
  const int64_t parts = SumParts(channels, per_channel);
  GradSumsKernel<<<dim3(static_cast<unsigned>(channels), static_cast<unsigned>(parts)),
                   kThreadsPerBlock, 0, stream>>>(x, dy, mean, invstd, per_channel, channels,
                                                  SpatialToWalk(spatial),
                                                  PartSize(per_channel, parts), scratch);
  FinishSumsKernel<<<BlocksFor(channels), kThreadsPerBlock, 0, stream>>>(scratch, parts, channels,
                                                                         sums, dbias, dscale);
}

void LaunchBatchNormGradCoefficients(double* sums, int64_t channels, double count,
                                     const float* scale, const float* invstd, cudaStream_t stream) {
  if (channels == 0) return;
  GradCoefficientsKernel<<<BlocksFor(channels), kThreadsPerBlock, 0, stream>>>(
      sums, channels, count, scale, invstd);
}

void LaunchBatchNormGradInput(const float* x, const float* dy, const float* mean,
                              const float* invstd, const double* coefficients, float* dx,
                              int64_t batch, int64_t channels, int64_t spatial,
                              cudaStream_t stream) {
  const int64_t n = batch * channels * spatial;
  if (n == 0) return;
  if (Narrow(n)) {
    GradInputKernel<true><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        x, dy, mean, invstd, coefficients, dx, n, channels, spatial);
  } else {
    GradInputKernel<false><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        x, dy, mean, invstd, coefficients, dx, n, channels, spatial);
  }
}

}  // namespace replicad
