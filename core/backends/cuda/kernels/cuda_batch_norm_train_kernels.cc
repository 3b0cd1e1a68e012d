// replicad.BatchNormTrain and replicad.BatchNormGrad on a CUDA slot, with
// the CPU kernel's arithmetic (batch_norm_train_kernels.cc): per-channel sums
// in double, summed over the step's slots through its collective in the same
// packing ([2 * channels sums, element count]) and the same sequence of
// calls, so CPU and CUDA slots could share one step.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/batch_norm_train_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// X viewed as [batch, channels, spatial], as the CPU kernel views it.
struct Planes {
  int64_t batch = 1, channels = 1, spatial = 1;
};

Planes PlanesOf(const Shape& x) {
  Planes p{x[0], x.size() > 1 ? x[1] : 1, 1};
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  return p;
}

// One slot's per-channel sums and their sum over the step: device memory the
// sums kernel writes and the later kernels read, and a pinned host copy for
// the collective, which is a host rendezvous. Both made at build time.
class StepSums {
 public:
  StepSums(const CudaKernelContext& context, int64_t channels)
      : context_(context), channels_(channels) {}

  ~StepSums() {
    if (host_ == nullptr) return;
    // The last Run's copy back to the device may still read host_. Errors
    // here have nowhere to go; the memory is given back either way.
    cudaStreamSynchronize(context_.stream);
    cudaFreeHost(host_);
  }

  StepSums(const StepSums&) = delete;
  StepSums& operator=(const StepSums&) = delete;

  // `device_doubles` >= 2 * channels: what the kernels keep on the device;
  // then the sums launchers' scratch for `planes` (BatchNormSumsScratch).
  absl::Status Init(CudaKernelContext& context, size_t device_doubles, const Planes& planes) {
    scratch_offset_ = device_doubles;
    const size_t scratch =
        static_cast<size_t>(BatchNormSumsScratch(planes.batch, planes.channels, planes.spatial));
    REPLICAD_ASSIGN_OR_RETURN(device_,
                              context.allocate((device_doubles + scratch) * sizeof(double)));
    void* host = nullptr;
    REPLICAD_CUDA_RETURN_IF_ERROR(context.device,
                                  cudaMallocHost(&host, HostCount() * sizeof(double)));
    host_ = static_cast<double*>(host);
    return absl::OkStatus();
  }

  double* device() const { return static_cast<double*>(device_->data()); }
  double* scratch() const { return device() + scratch_offset_; }

  // Once the sums kernel has been enqueued, when the step has a collective:
  // brings device()[0, 2 channels) to the host (waiting for it), appends
  // this slot's element count per channel, sums all of it over the step, and
  // enqueues the copy of the step's sums back into device(). Returns the
  // step's element count per channel.
  absl::StatusOr<double> SumOverStep(const RunContext& run, double local_count) {
    // Without a collective this slot's sums are the step's: they stay on the
    // device, and the stream is not waited for.
    if (run.collective == nullptr) return local_count;
    const size_t sums_bytes = static_cast<size_t>(2 * channels_) * sizeof(double);
    REPLICAD_CUDA_RETURN_IF_ERROR(
        context_.device,
        cudaMemcpyAsync(host_, device(), sums_bytes, cudaMemcpyDeviceToHost, context_.stream));
    // Unavoidable: the collective adds host values.
    REPLICAD_CUDA_RETURN_IF_ERROR(context_.device, cudaStreamSynchronize(context_.stream));
    host_[2 * channels_] = local_count;
    run.collective->AllReduceSum(run.participant, host_, HostCount());
    const double count = host_[2 * channels_];
    // host_ must stay unchanged until this copy has read it: the host next
    // writes it after the next Run's cudaStreamSynchronize (or in the
    // destructor's), and the next copy into it is ordered after this one on
    // the stream.
    REPLICAD_CUDA_RETURN_IF_ERROR(
        context_.device,
        cudaMemcpyAsync(device(), host_, sums_bytes, cudaMemcpyHostToDevice, context_.stream));
    return count;
  }

 private:
  size_t HostCount() const { return static_cast<size_t>(2 * channels_ + 1); }

  const CudaKernelContext& context_;
  int64_t channels_;
  std::shared_ptr<Buffer> device_;
  size_t scratch_offset_ = 0;  // Doubles before the sums launchers' scratch.
  double* host_ = nullptr;     // Pinned: [sums..., count], 2 * channels + 1 doubles.
};

class BatchNormTrainKernel : public Kernel {
 public:
  BatchNormTrainKernel(const CudaKernelContext& context, Planes planes, float epsilon,
                       float momentum)
      : context_(context),
        p_(planes),
        epsilon_(epsilon),
        momentum_(momentum),
        sums_(context, planes.channels) {}

  // sums[c] and sums[C + c] (later the affine map's a and b).
  absl::Status Init(CudaKernelContext& context) {
    return sums_.Init(context, static_cast<size_t>(2 * p_.channels), p_);
  }

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    LaunchBatchNormSums(x, p_.batch, p_.channels, p_.spatial, sums_.device(), sums_.scratch(),
                        context_.stream);
    REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(context_.device, "BatchNormSums"));
    REPLICAD_ASSIGN_OR_RETURN(double count,
                              sums_.SumOverStep(run, static_cast<double>(p_.batch * p_.spatial)));
    LaunchBatchNormTrainStatistics(
        sums_.device(), p_.channels, count, epsilon_, momentum_,
        static_cast<const float*>(inputs[1]), static_cast<const float*>(inputs[2]),
        static_cast<const float*>(inputs[3]), static_cast<const float*>(inputs[4]),
        static_cast<float*>(outputs[1]), static_cast<float*>(outputs[2]),
        static_cast<float*>(outputs[3]), static_cast<float*>(outputs[4]), context_.stream);
    REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(context_.device, "BatchNormTrainStatistics"));
    LaunchBatchNormApply(x, sums_.device(), static_cast<float*>(outputs[0]), p_.batch, p_.channels,
                         p_.spatial, context_.stream);
    return LastLaunchStatus(context_.device, "BatchNormApply");
  }

 private:
  const CudaKernelContext& context_;
  Planes p_;
  double epsilon_, momentum_;  // The CPU kernel's doubles, from the float attributes.
  StepSums sums_;
};

// dscale and dB are this slot's sums (written by the sums kernel before the
// collective); dX uses the step's.
class BatchNormGradKernel : public Kernel {
 public:
  BatchNormGradKernel(const CudaKernelContext& context, Planes planes)
      : context_(context), p_(planes), sums_(context, planes.channels) {}

  // sums[c], sums[C + c], then scale * invstd in sums[2C + c].
  absl::Status Init(CudaKernelContext& context) {
    return sums_.Init(context, static_cast<size_t>(3 * p_.channels), p_);
  }

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* mean = static_cast<const float*>(inputs[2]);
    const float* invstd = static_cast<const float*>(inputs[3]);
    const float* dy = static_cast<const float*>(inputs[4]);
    LaunchBatchNormGradSums(x, dy, mean, invstd, p_.batch, p_.channels, p_.spatial, sums_.device(),
                            sums_.scratch(), static_cast<float*>(outputs[1]),
                            static_cast<float*>(outputs[2]), context_.stream);
    REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(context_.device, "BatchNormGradSums"));
    REPLICAD_ASSIGN_OR_RETURN(double count,
                              sums_.SumOverStep(run, static_cast<double>(p_.batch * p_.spatial)));
    LaunchBatchNormGradCoefficients(sums_.device(), p_.channels, count, scale, invstd,
                                    context_.stream);
    REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(context_.device, "BatchNormGradCoefficients"));
    LaunchBatchNormGradInput(x, dy, mean, invstd, sums_.device(), static_cast<float*>(outputs[0]),
                             p_.batch, p_.channels, p_.spatial, context_.stream);
    return LastLaunchStatus(context_.device, "BatchNormGradInput");
  }

 private:
  const CudaKernelContext& context_;
  Planes p_;
  StepSums sums_;
};

}  // namespace

KernelOrStatus MakeCudaBatchNormTrainKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(float epsilon, FloatAttribute(spec, "epsilon", 1e-5f));
  REPLICAD_ASSIGN_OR_RETURN(float momentum, FloatAttribute(spec, "momentum", 0.9f));
  auto kernel = std::make_unique<BatchNormTrainKernel>(context, PlanesOf(spec.inputs[0]->shape),
                                                       epsilon, momentum);
  REPLICAD_RETURN_IF_ERROR(kernel->Init(context));
  return kernel;
}

KernelOrStatus MakeCudaBatchNormGradKernel(const KernelSpec& spec, CudaKernelContext& context) {
  auto kernel = std::make_unique<BatchNormGradKernel>(context, PlanesOf(spec.inputs[0]->shape));
  REPLICAD_RETURN_IF_ERROR(kernel->Init(context));
  return kernel;
}

}  // namespace replicad
