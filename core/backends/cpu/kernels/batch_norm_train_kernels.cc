// Batch normalization in training: the forward pass with the batch's
// statistics and its backward pass. Loops in double where they sum, so the
// statistics of a batch split over slots agree with one slot's to ~1e-15.
// With a step collective (SyncBatchNorm) the sums are the whole step's.

#include <cmath>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/batch_norm_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Sums `sums` over the step's slots, when the step has a collective.
void SumOverStep(const RunContext& run, std::vector<double>* sums) {
  if (run.collective != nullptr) {
    run.collective->AllReduceSum(run.participant, sums->data(), sums->size());
  }
}

// A float32 [N, C, spatial] tensor, visited channel by channel.
struct Planes {
  int64_t batch, channels, spatial;
  int64_t at(int64_t n, int64_t c, int64_t s) const { return (n * channels + c) * spatial + s; }
};

class BatchNormTrainKernel : public Kernel {
 public:
  BatchNormTrainKernel(Planes planes, float epsilon, float momentum)
      : p_(planes), epsilon_(epsilon), momentum_(momentum) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = static_cast<const float*>(inputs[2]);
    const float* running_mean = static_cast<const float*>(inputs[3]);
    const float* running_var = static_cast<const float*>(inputs[4]);
    float* y = static_cast<float*>(outputs[0]);
    float* saved_mean = static_cast<float*>(outputs[1]);
    float* saved_invstd = static_cast<float*>(outputs[2]);
    float* new_mean = static_cast<float*>(outputs[3]);
    float* new_var = static_cast<float*>(outputs[4]);
    const int64_t c_count = p_.channels;
    // [sum per channel, sum of squares per channel, element count per channel].
    std::vector<double> sums(2 * c_count + 1, 0.0);
    for (int64_t n = 0; n < p_.batch; ++n) {
      for (int64_t c = 0; c < c_count; ++c) {
        for (int64_t s = 0; s < p_.spatial; ++s) {
          const double v = x[p_.at(n, c, s)];
          sums[c] += v;
          sums[c_count + c] += v * v;
        }
      }
    }
    sums[2 * c_count] = static_cast<double>(p_.batch * p_.spatial);
    SumOverStep(run, &sums);
    const double count = sums[2 * c_count];
    for (int64_t c = 0; c < c_count; ++c) {
      const double mean = sums[c] / count;
      const double var = std::max(0.0, sums[c_count + c] / count - mean * mean);
      const double invstd = 1.0 / std::sqrt(var + epsilon_);
      saved_mean[c] = static_cast<float>(mean);
      saved_invstd[c] = static_cast<float>(invstd);
      const double unbiased = count > 1 ? var * count / (count - 1) : var;
      new_mean[c] = static_cast<float>(momentum_ * running_mean[c] + (1.0 - momentum_) * mean);
      new_var[c] = static_cast<float>(momentum_ * running_var[c] + (1.0 - momentum_) * unbiased);
      const double a = scale[c] * invstd, b = bias[c] - mean * a;
      for (int64_t n = 0; n < p_.batch; ++n) {
        for (int64_t s = 0; s < p_.spatial; ++s) {
          const int64_t i = p_.at(n, c, s);
          y[i] = static_cast<float>(x[i] * a + b);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  Planes p_;
  double epsilon_, momentum_;
};

// dscale = sum(dY xhat) and dB = sum(dY) over this slot's rows (the reducer
// adds the slots'); dX = scale invstd (dY - sum(dY)/M - xhat sum(dY xhat)/M)
// with the sums and the count M over the whole step.
class BatchNormGradKernel : public Kernel {
 public:
  explicit BatchNormGradKernel(Planes planes) : p_(planes) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* mean = static_cast<const float*>(inputs[2]);
    const float* invstd = static_cast<const float*>(inputs[3]);
    const float* dy = static_cast<const float*>(inputs[4]);
    float* dx = static_cast<float*>(outputs[0]);
    float* dscale = static_cast<float*>(outputs[1]);
    float* dbias = static_cast<float*>(outputs[2]);
    const int64_t c_count = p_.channels;
    std::vector<double> sums(2 * c_count + 1, 0.0);  // sum(dY), sum(dY xhat), count.
    for (int64_t n = 0; n < p_.batch; ++n) {
      for (int64_t c = 0; c < c_count; ++c) {
        for (int64_t s = 0; s < p_.spatial; ++s) {
          const int64_t i = p_.at(n, c, s);
          sums[c] += dy[i];
          sums[c_count + c] += double(dy[i]) * (double(x[i]) - mean[c]) * invstd[c];
        }
      }
    }
    for (int64_t c = 0; c < c_count; ++c) {
      dbias[c] = static_cast<float>(sums[c]);
      dscale[c] = static_cast<float>(sums[c_count + c]);
    }
    sums[2 * c_count] = static_cast<double>(p_.batch * p_.spatial);
    SumOverStep(run, &sums);
    const double count = sums[2 * c_count];
    for (int64_t c = 0; c < c_count; ++c) {
      const double mean_dy = sums[c] / count, mean_dy_xhat = sums[c_count + c] / count;
      const double k = double(scale[c]) * invstd[c];
      for (int64_t n = 0; n < p_.batch; ++n) {
        for (int64_t s = 0; s < p_.spatial; ++s) {
          const int64_t i = p_.at(n, c, s);
          const double xhat = (double(x[i]) - mean[c]) * invstd[c];
          dx[i] = static_cast<float>(k * (dy[i] - mean_dy - xhat * mean_dy_xhat));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  Planes p_;
};

Planes PlanesOf(const Shape& x) {
  Planes p{x[0], x.size() > 1 ? x[1] : 1, 1};
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  return p;
}

}  // namespace

KernelOrStatus MakeBatchNormTrainKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(float epsilon, FloatAttribute(spec, "epsilon", 1e-5f));
  REPLICAD_ASSIGN_OR_RETURN(float momentum, FloatAttribute(spec, "momentum", 0.9f));
  return std::make_unique<BatchNormTrainKernel>(PlanesOf(spec.inputs[0]->shape), epsilon, momentum);
}

KernelOrStatus MakeBatchNormGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  return std::make_unique<BatchNormGradKernel>(PlanesOf(spec.inputs[0]->shape));
}

}  // namespace replicad
