#include <cstdint>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/training_launch.h"
#include "core/ops/dropout_mask.h"

namespace replicad {
namespace {

__global__ void ReluGradKernel(const float* y, const float* dy, float* dx, int64_t n, float alpha) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { dx[i] = y[i] > 0 ? dy[i] : alpha * dy[i]; }
}

__global__ void ClipGradKernel(const float* x, const float* dy, float* dx, int64_t n, float min,
                               float max) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) { dx[i] = x[i] >= min && x[i] <= max ? dy[i] : 0.0f; }
}

__global__ void DropoutTrainKernel(const float* x, float* y, float* mask, int64_t n,
                                   int64_t row_size, float ratio, float keep_scale,
                                   uint64_t step_key, int64_t first_row) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const int64_t r = i / row_size;
    const int64_t e = i - r * row_size;
    const float u = DropoutUniform(DropoutRowKey(step_key, first_row + r), e);
    const float m = u >= ratio ? keep_scale : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

// Sum of v over the block's kThreads threads, in a fixed tree; every thread
// gets the total. `shared` holds kThreads values.
template <int kThreads, typename T>
__device__ T BlockSum(T v, T* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  const T total = shared[0];
  __syncthreads();  // `shared` is free again for the caller's next reduction.
  return total;
}

// The first index of the maximum: ties go to the smaller index, as the CPU
// kernel's scan with a strict > gives. index -1: this thread saw nothing.
struct ArgMax {
  float value;
  int64_t index;
};

__device__ void Offer(ArgMax& best, float value, int64_t index) {
  if (index < 0) return;
  if (best.index < 0 || value > best.value || (value == best.value && index < best.index)) {
    best.value = value;
    best.index = index;
  }
}

template <int kThreads>
__device__ ArgMax BlockArgMax(ArgMax mine, float* values, int64_t* indices) {
  values[threadIdx.x] = mine.value;
  indices[threadIdx.x] = mine.index;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      ArgMax best{values[threadIdx.x], indices[threadIdx.x]};
      Offer(best, values[threadIdx.x + width], indices[threadIdx.x + width]);
      values[threadIdx.x] = best.value;
      indices[threadIdx.x] = best.index;
    }
    __syncthreads();
  }
  const ArgMax total{values[0], indices[0]};
  __syncthreads();
  return total;
}

template <int kThreads>
__device__ ArgMax RowArgMax(const float* row, int64_t classes, float* values, int64_t* indices) {
  ArgMax mine{0.0f, -1};
  // Ascending within the thread, so a strict > keeps its first maximum.
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
    if (mine.index < 0 || row[c] > mine.value) mine = ArgMax{row[c], c};
  }
  return BlockArgMax<kThreads>(mine, values, indices);
}

// One block per row (grid-stride over rows).
template <int kThreads>
__global__ void SoftmaxCrossEntropyRowsKernel(const float* logits, const int64_t* labels,
                                              const float* probabilities, float* dlogits,
                                              int64_t rows, int64_t classes, double* row_loss,
                                              uint64_t* row_correct, uint64_t* bad_row) {
  __shared__ double sums[kThreads];
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * classes;
    float* grad = dlogits + r * classes;
    const ArgMax top = RowArgMax<kThreads>(row, classes, values, indices);
    // log-sum-exp shifted by the maximum, in double as on the CPU.
    const double max = top.value;
    double partial = 0;
    for (int64_t c = threadIdx.x; c < classes; c += kThreads) partial += exp(double(row[c]) - max);
    const double log_sum = log(BlockSum<kThreads>(partial, sums)) + max;
    if (labels != nullptr) {
      const int64_t label = labels[r];
      const bool valid = label >= 0 && label < classes;
      for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
        grad[c] = static_cast<float>(exp(double(row[c]) - log_sum) - (c == label ? 1 : 0));
      }
      if (threadIdx.x == 0) {
        if (!valid) {
          atomicMin(reinterpret_cast<unsigned long long*>(bad_row),
                    static_cast<unsigned long long>(r));
        }
        row_loss[r] = valid ? log_sum - row[label] : 0.0;
        row_correct[r] = valid && top.index == label ? 1 : 0;
      }
    } else {
      const float* target = probabilities + r * classes;
      double loss = 0, target_sum = 0;
      for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
        loss -= target[c] * (double(row[c]) - log_sum);
        target_sum += target[c];
      }
      loss = BlockSum<kThreads>(loss, sums);
      target_sum = BlockSum<kThreads>(target_sum, sums);
      const ArgMax target_top = RowArgMax<kThreads>(target, classes, values, indices);
      // d/dlogit_c of -sum_k t_k log softmax_k = softmax_c * sum(t) - t_c.
      for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
        grad[c] = static_cast<float>(exp(double(row[c]) - log_sum) * target_sum - target[c]);
      }
      if (threadIdx.x == 0) {
        row_loss[r] = loss;
        row_correct[r] = top.index == target_top.index ? 1 : 0;
      }
    }
  }
}

// One block: the rows' losses and hits, each thread over a fixed stride of
// rows, then a fixed tree.
__global__ void SumRowsKernel(const double* row_loss, const uint64_t* row_correct, int64_t rows,
                              float* loss_sum, float* correct) {
  __shared__ double losses[kThreadsPerBlock];
  __shared__ uint64_t hits[kThreadsPerBlock];
  double loss = 0;
  uint64_t hit = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreadsPerBlock) {
    loss += row_loss[r];
    hit += row_correct[r];
  }
  loss = BlockSum<kThreadsPerBlock>(loss, losses);
  hit = BlockSum<kThreadsPerBlock>(hit, hits);
  if (threadIdx.x == 0) {
    *loss_sum = static_cast<float>(loss);
    *correct = static_cast<float>(hit);
  }
}

__global__ void MeanSquaredErrorKernel(const float* y, const float* t, float* dy, int64_t n,
                                       double scale, double* partial) {
  __shared__ double sums[kThreadsPerBlock];
  double loss = 0;
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    const double diff = double(y[i]) - t[i];
    loss += diff * diff * scale;
    dy[i] = static_cast<float>(2 * diff * scale);
  }
  loss = BlockSum<kThreadsPerBlock>(loss, sums);
  if (threadIdx.x == 0) partial[blockIdx.x] = loss;
}

__global__ void SumPartialsKernel(const double* partial, int64_t count, float* out) {
  __shared__ double sums[kThreadsPerBlock];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += kThreadsPerBlock) sum += partial[i];
  sum = BlockSum<kThreadsPerBlock>(sum, sums);
  if (threadIdx.x == 0) *out = static_cast<float>(sum);
}

// Offset in dY of element `index` of the dims (row-major over them).
__device__ int64_t OffsetOf(int64_t index, int rank, const int64_t* dims, const int64_t* strides) {
  int64_t offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t coordinate = index % dims[d];
    index /= dims[d];
    offset += coordinate * strides[d];
  }
  return offset;
}

// Output o, chunk blockIdx.y: [begin, end) of its reduced elements.
__device__ void ChunkOf(const SumToShapeLayout& layout, int64_t* begin, int64_t* end) {
  const int64_t chunk = (layout.n_reduced + layout.splits - 1) / layout.splits;
  *begin = chunk * blockIdx.y;
  *end = *begin + chunk < layout.n_reduced ? *begin + chunk : layout.n_reduced;
}

// Where the sum of (o, chunk) goes: the output, or its partial slot.
__device__ float* SumTarget(const SumToShapeLayout& layout, float* out, float* partial, int64_t o) {
  return layout.splits == 1 ? out + o : partial + blockIdx.y * layout.n_out + o;
}

// One thread per (output, chunk): walks its chunk's reduced elements in
// dY's order with an odometer, so with one chunk it adds as the CPU does.
__global__ void SumToShapeThreadKernel(const float* dy, float* out, SumToShapeLayout layout,
                                       float* partial) {
  int64_t begin, end;
  ChunkOf(layout, &begin, &end);
  REPLICAD_GRID_STRIDE_LOOP(o, layout.n_out) {
    const float* base = dy + OffsetOf(o, layout.kept_rank, layout.kept_dims, layout.kept_strides);
    int64_t coordinates[kMaxRank];
    int64_t rest = begin;
    int64_t offset = 0;
    for (int d = layout.reduced_rank - 1; d >= 0; --d) {
      coordinates[d] = rest % layout.reduced_dims[d];
      rest /= layout.reduced_dims[d];
      offset += coordinates[d] * layout.reduced_strides[d];
    }
    float sum = 0;
    for (int64_t r = begin; r < end; ++r) {
      sum += base[offset];
      for (int d = layout.reduced_rank - 1; d >= 0; --d) {
        offset += layout.reduced_strides[d];
        if (++coordinates[d] < layout.reduced_dims[d]) break;
        offset -= coordinates[d] * layout.reduced_strides[d];
        coordinates[d] = 0;
      }
    }
    *SumTarget(layout, out, partial, o) = sum;
  }
}

// One block per (output, chunk): its threads stride over the chunk, then a
// fixed tree adds their sums.
__global__ void SumToShapeBlockKernel(const float* dy, float* out, SumToShapeLayout layout,
                                      float* partial) {
  __shared__ float sums[kThreadsPerBlock];
  int64_t begin, end;
  ChunkOf(layout, &begin, &end);
  for (int64_t o = blockIdx.x; o < layout.n_out; o += gridDim.x) {
    const float* base = dy + OffsetOf(o, layout.kept_rank, layout.kept_dims, layout.kept_strides);
    float sum = 0;
    for (int64_t r = begin + threadIdx.x; r < end; r += kThreadsPerBlock) {
      sum += base[OffsetOf(r, layout.reduced_rank, layout.reduced_dims, layout.reduced_strides)];
    }
    sum = BlockSum<kThreadsPerBlock>(sum, sums);
    if (threadIdx.x == 0) *SumTarget(layout, out, partial, o) = sum;
  }
}

// out[o] = the chunks' sums of output o, added in chunk order.
__global__ void SumChunksKernel(const float* partial, float* out, int64_t n_out, int splits) {
  REPLICAD_GRID_STRIDE_LOOP(o, n_out) {
    float sum = 0;
    for (int s = 0; s < splits; ++s) sum += partial[s * n_out + o];
    out[o] = sum;
  }
}

__global__ void PadGradKernel(const float* dy, float* dx, int64_t n, PadGradTables tables) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    int64_t position[kMaxRank], first[kMaxRank], last[kMaxRank];
    int64_t rest = i;
    bool empty = false;
    for (int d = tables.rank - 1; d >= 0; --d) {
      const int64_t x = rest % tables.x_dims[d];
      rest /= tables.x_dims[d];
      first[d] = tables.table[tables.bounds[d] + x];
      last[d] = tables.table[tables.bounds[d] + x + 1];
      position[d] = first[d];
      empty |= first[d] == last[d];
    }
    float sum = 0;
    if (!empty) {
      // The product of the lists in lexicographic order: dY's row-major order.
      for (;;) {
        int64_t offset = 0;
        for (int d = 0; d < tables.rank; ++d) offset += tables.table[position[d]];
        sum += dy[offset];
        int d = tables.rank - 1;
        for (; d >= 0; --d) {
          if (++position[d] < last[d]) break;
          position[d] = first[d];
        }
        if (d < 0) break;
      }
    }
    dx[i] = sum;
  }
}

int GridFor(int64_t blocks) { return static_cast<int>(blocks < 65535 ? blocks : 65535); }

__global__ void AllFiniteResetKernel(float* out) { *out = 1.0f; }

__global__ void AllFiniteScanKernel(const float* x, int64_t n, float* out) {
  REPLICAD_GRID_STRIDE_LOOP(i, n) {
    if (!isfinite(x[i])) *out = 0.0f;
  }
}

}  // namespace

void LaunchAllFinite(const float* x, int64_t n, float* out, cudaStream_t stream) {
  AllFiniteResetKernel<<<1, 1, 0, stream>>>(out);
  if (n == 0) return;
  AllFiniteScanKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, n, out);
}

void LaunchReluGrad(const float* y, const float* dy, float* dx, int64_t n, float alpha,
                    cudaStream_t stream) {
  if (n == 0) return;
  ReluGradKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(y, dy, dx, n, alpha);
}

void LaunchClipGrad(const float* x, const float* dy, float* dx, int64_t n, float min, float max,
                    cudaStream_t stream) {
  if (n == 0) return;
  ClipGradKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(x, dy, dx, n, min, max);
}

void LaunchDropoutTrain(const float* x, float* y, float* mask, int64_t rows, int64_t row_size,
                        float ratio, float keep_scale, uint64_t step_key, int64_t first_row,
                        cudaStream_t stream) {
  const int64_t n = rows * row_size;
  if (n == 0) return;
  DropoutTrainKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
      x, y, mask, n, row_size, ratio, keep_scale, step_key, first_row);
}

void LaunchSumToShape(const float* dy, float* out, const SumToShapeLayout& layout, float* partial,
                      cudaStream_t stream) {
  if (layout.n_out == 0) return;
  if (layout.thread_per_output) {
    const dim3 grid(BlocksFor(layout.n_out), layout.splits);
    SumToShapeThreadKernel<<<grid, kThreadsPerBlock, 0, stream>>>(dy, out, layout, partial);
  } else {
    const dim3 grid(GridFor(layout.n_out), layout.splits);
    SumToShapeBlockKernel<<<grid, kThreadsPerBlock, 0, stream>>>(dy, out, layout, partial);
  }
  if (layout.splits > 1) {
    SumChunksKernel<<<BlocksFor(layout.n_out), kThreadsPerBlock, 0, stream>>>(
        partial, out, layout.n_out, layout.splits);
  }
}

void LaunchPadGrad(const float* dy, float* dx, int64_t n, const PadGradTables& tables,
                   cudaStream_t stream) {
  if (n == 0) return;
  PadGradKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(dy, dx, n, tables);
}

void LaunchSoftmaxCrossEntropy(const float* logits, const int64_t* labels,
                               const float* probabilities, float* dlogits, int64_t rows,
                               int64_t classes, double* row_loss, uint64_t* row_correct,
                               uint64_t* bad_row, float* loss_sum, float* correct,
                               cudaStream_t stream) {
  if (rows > 0) {
    // A warp suffices for the usual few classes; wide rows take a full block.
    if (classes <= 64) {
      SoftmaxCrossEntropyRowsKernel<32><<<GridFor(rows), 32, 0, stream>>>(
          logits, labels, probabilities, dlogits, rows, classes, row_loss, row_correct, bad_row);
    } else {
      SoftmaxCrossEntropyRowsKernel<kThreadsPerBlock>
          <<<GridFor(rows), kThreadsPerBlock, 0, stream>>>(logits, labels, probabilities, dlogits,
                                                           rows, classes, row_loss, row_correct,
                                                           bad_row);
    }
  }
  SumRowsKernel<<<1, kThreadsPerBlock, 0, stream>>>(row_loss, row_correct, rows, loss_sum, correct);
}

int64_t MeanSquaredErrorPartials(int64_t n) { return BlocksFor(n); }

void LaunchMeanSquaredError(const float* y, const float* t, float* dy, int64_t n, double scale,
                            double* partial, float* loss_sum, cudaStream_t stream) {
  const int64_t blocks = MeanSquaredErrorPartials(n);
  if (blocks > 0) {
    MeanSquaredErrorKernel<<<static_cast<int>(blocks), kThreadsPerBlock, 0, stream>>>(
        y, t, dy, n, scale, partial);
  }
  SumPartialsKernel<<<1, kThreadsPerBlock, 0, stream>>>(partial, blocks, loss_sum);
}

}  // namespace replicad
