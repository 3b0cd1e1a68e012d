#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_TRAINING_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_TRAINING_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backends/cuda/kernels/elementwise_launch.h"

namespace replicad {

// Internal to the CUDA kernels: launchers of the training-only kernels
// (training.cu) for cuda_training_kernels.cc. Same conventions as
// elementwise_launch.h: they enqueue on `stream` and return at once, pointers
// are device memory, float32 unless typed otherwise, and launch errors are
// read with LastLaunchStatus. Every reduction here adds in an order fixed by
// the sizes alone (no atomics on values), so reruns give the same bits.

// dx[i] = y[i] > 0 ? dy[i] : alpha * dy[i] (replicad.ReluGrad).
void LaunchReluGrad(const float* y, const float* dy, float* dx, int64_t n, float alpha,
                    cudaStream_t stream);
// dx[i] = min <= x[i] <= max ? dy[i] : 0 (replicad.ClipGrad).
void LaunchClipGrad(const float* x, const float* dy, float* dx, int64_t n, float min, float max,
                    cudaStream_t stream);

// replicad.DropoutTrain on x viewed as [rows, row_size]: mask[i] is
// keep_scale where the generator of core/ops/dropout_mask.h draws u >= ratio
// for (DropoutRowKey(step_key, first_row + r), e), else 0; y = x * mask.
void LaunchDropoutTrain(const float* x, float* y, float* mask, int64_t rows, int64_t row_size,
                        float ratio, float keep_scale, uint64_t step_key, int64_t first_row,
                        cudaStream_t stream);

// replicad.SumToShape. dY's dims split into kept ones (the output's, in
// order) and reduced ones, each with its stride in dY (elements): output o
// (row-major over the kept dims) sums dY[base(o) + offset(r)] over the
// n_reduced reduced elements r. The reduced range of each output is cut into
// `splits` chunks: with splits > 1 the chunks' sums go to `partial`
// (n_out * splits floats) and are then added in chunk order.
struct SumToShapeLayout {
  int64_t n_out = 1;
  int kept_rank = 0;
  int64_t kept_dims[kMaxRank] = {};
  int64_t kept_strides[kMaxRank] = {};
  int64_t n_reduced = 1;
  int reduced_rank = 0;
  int64_t reduced_dims[kMaxRank] = {};
  int64_t reduced_strides[kMaxRank] = {};
  // One thread per (output, chunk), adding in dY's order: for outputs
  // contiguous in dY (coalesced). Otherwise one block per (output, chunk).
  bool thread_per_output = false;
  int splits = 1;
};
void LaunchSumToShape(const float* dy, float* out, const SumToShapeLayout& layout, float* partial,
                      cudaStream_t stream);

// replicad.PadGrad as a gather: dims are separable, so per dX dim d and index
// x, the dY indices whose pad read x form a list (ascending). dX element
// (x_0, ..., x_{rank-1}) sums dY over the product of its lists, in dY's
// row-major order (as the CPU kernel adds them), and is 0 when a list is
// empty. In `table`: for dim d, x_dims[d] + 1 list bounds at bounds[d]
// (absolute positions in `table`), and the lists' entries, each a dY index
// already multiplied by dY's stride of dim d.
struct PadGradTables {
  int rank = 0;
  int64_t x_dims[kMaxRank] = {};
  int64_t bounds[kMaxRank] = {};
  const int64_t* table = nullptr;  // Device memory, owned by the kernel.
};
void LaunchPadGrad(const float* dy, float* dx, int64_t n, const PadGradTables& tables,
                   cudaStream_t stream);

// replicad.SoftmaxCrossEntropy on logits [rows, classes] with int64 `labels`
// [rows] or float `probabilities` [rows, classes] (exactly one non-null), as
// the CPU kernel computes it (log-sum-exp and losses in double). Writes
// dlogits, each row's loss and correctness to row_loss / row_correct
// (rows entries each), then loss_sum[0] and correct[0] (float) from them.
// A label outside [0, classes) lowers *bad_row (atomicMin) to its row; the
// caller sets *bad_row to UINT64_MAX beforehand and reads it afterwards.
void LaunchSoftmaxCrossEntropy(const float* logits, const int64_t* labels,
                               const float* probabilities, float* dlogits, int64_t rows,
                               int64_t classes, double* row_loss, uint64_t* row_correct,
                               uint64_t* bad_row, float* loss_sum, float* correct,
                               cudaStream_t stream);

// replicad.MeanSquaredError over n elements: dy = 2 * (y - t) * scale and
// loss_sum[0] = sum of (y - t)^2 * scale, in double through `partial`
// (MeanSquaredErrorPartials(n) doubles). scale = 1 / row size.
int64_t MeanSquaredErrorPartials(int64_t n);
void LaunchMeanSquaredError(const float* y, const float* t, float* dy, int64_t n, double scale,
                            double* partial, float* loss_sum, cudaStream_t stream);

// replicad.AllFinite: *out = 1 when none of x's n elements is NaN or
// infinite, else 0: *out is set to 1, then one pass whose threads write 0
// where they find such an element (every such write is the same value).
void LaunchAllFinite(const float* x, int64_t n, float* out, cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_TRAINING_LAUNCH_H_
