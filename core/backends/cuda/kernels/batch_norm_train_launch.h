#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BATCH_NORM_TRAIN_LAUNCH_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BATCH_NORM_TRAIN_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace replicad {

// Internal to the CUDA kernels: launchers of batch_norm_train.cu, for
// replicad.BatchNormTrain and replicad.BatchNormGrad. X and dY are float32
// [batch, channels, spatial]; per-channel tensors are float32 [channels];
// `sums` is device memory of doubles. Each launcher enqueues on `stream` and
// returns at once (nothing with no elements to visit); errors are read with
// LastLaunchStatus. The arithmetic is the CPU kernel's, in double; per-channel
// sums are deterministic (a channel's elements split into parts fixed by the
// shape, a fixed-shape tree per part, the parts added in order, no atomics)
// but added in another order than the CPU's loop.

// Doubles of device scratch the sums launchers need for these dims (the
// parts' partial sums).
int64_t BatchNormSumsScratch(int64_t batch, int64_t channels, int64_t spatial);

// sums[c] = sum of x over channel c, sums[channels + c] = sum of x^2;
// `scratch` holds BatchNormSumsScratch doubles.
void LaunchBatchNormSums(const float* x, int64_t batch, int64_t channels, int64_t spatial,
                         double* sums, double* scratch, cudaStream_t stream);

// From the step's sums (sums[0, 2 channels), as above) and element count per
// channel: saved_mean, saved_invstd, new running statistics (momentum * old +
// (1 - momentum) * batch, the variance unbiased), and in place of the sums
// the affine map y = x * a + b: sums[c] = a, sums[channels + c] = b.
void LaunchBatchNormTrainStatistics(double* sums, int64_t channels, double count, double epsilon,
                                    double momentum, const float* scale, const float* bias,
                                    const float* running_mean, const float* running_var,
                                    float* saved_mean, float* saved_invstd, float* new_mean,
                                    float* new_var, cudaStream_t stream);

// y = x * a[c] + b[c] with `affine` as LaunchBatchNormTrainStatistics leaves it.
void LaunchBatchNormApply(const float* x, const double* affine, float* y, int64_t batch,
                          int64_t channels, int64_t spatial, cudaStream_t stream);

// sums[c] = sum of dy, sums[channels + c] = sum of dy * xhat over channel c,
// xhat = (x - mean[c]) * invstd[c]; the same sums, rounded to float, to
// dbias[c] and dscale[c] (this slot's rows only); `scratch` as above.
void LaunchBatchNormGradSums(const float* x, const float* dy, const float* mean,
                             const float* invstd, int64_t batch, int64_t channels, int64_t spatial,
                             double* sums, double* scratch, float* dscale, float* dbias,
                             cudaStream_t stream);

// `sums` holds 3 * channels doubles, the first 2 * channels being the step's
// sums as above: turns them into mean(dy), mean(dy * xhat) (divided by
// `count`) and writes scale[c] * invstd[c] to sums[2 channels + c].
void LaunchBatchNormGradCoefficients(double* sums, int64_t channels, double count,
                                     const float* scale, const float* invstd, cudaStream_t stream);

// dx = scale invstd (dy - mean(dy) - xhat mean(dy xhat)), with `coefficients`
// as LaunchBatchNormGradCoefficients leaves them.
void LaunchBatchNormGradInput(const float* x, const float* dy, const float* mean,
                              const float* invstd, const double* coefficients, float* dx,
                              int64_t batch, int64_t channels, int64_t spatial,
                              cudaStream_t stream);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_BATCH_NORM_TRAIN_LAUNCH_H_
