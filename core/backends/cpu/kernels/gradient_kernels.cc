// Backward kernels of training graphs that are plain loops: oneDNN's
// backward primitives would need the forward pass's workspace (max pooling)
// or bring nothing (an elementwise mask, a broadcast sum).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/softmax_attributes.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

constexpr int64_t kParallelMin = 1 << 14;

class ReluGradKernel : public Kernel {
 public:
  ReluGradKernel(int64_t size, float alpha) : size_(size), alpha_(alpha) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* y = static_cast<const float*>(inputs[0]);
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
#pragma omp parallel for schedule(static) if (size_ >= kParallelMin)
    for (int64_t i = 0; i < size_; ++i) dx[i] = y[i] > 0 ? dy[i] : alpha_ * dy[i];
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  float alpha_;
};

class ClipGradKernel : public Kernel {
 public:
  ClipGradKernel(int64_t size, float min, float max) : size_(size), min_(min), max_(max) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
#pragma omp parallel for schedule(static) if (size_ >= kParallelMin)
    for (int64_t i = 0; i < size_; ++i) dx[i] = x[i] >= min_ && x[i] <= max_ ? dy[i] : 0.0f;
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  float min_, max_;
};

// Softmax backward along the normalized axis of [outer, axis, inner]:
// dX = Y (dY - sum(dY Y)); LogSoftmax backward: dX = dY - exp(Y) sum(dY).
class SoftmaxGradKernel : public Kernel {
 public:
  SoftmaxGradKernel(SoftmaxLayout layout, bool log) : layout_(layout), log_(log) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* y = static_cast<const float*>(inputs[0]);
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
    const int64_t n = layout_.axis_size, inner = layout_.inner;
    for (int64_t o = 0; o < layout_.outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * n * inner + i;
        double sum = 0;
        for (int64_t k = 0; k < n; ++k) {
          const int64_t at = base + k * inner;
          sum += log_ ? dy[at] : double(dy[at]) * y[at];
        }
        for (int64_t k = 0; k < n; ++k) {
          const int64_t at = base + k * inner;
          dx[at] = log_ ? static_cast<float>(dy[at] - std::exp(double(y[at])) * sum)
                        : static_cast<float>(y[at] * (dy[at] - sum));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  SoftmaxLayout layout_;
  bool log_;
};

class GlobalAveragePoolGradKernel : public Kernel {
 public:
  GlobalAveragePoolGradKernel(int64_t planes, int64_t plane_size)
      : planes_(planes), plane_size_(plane_size) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
    const float scale = 1.0f / static_cast<float>(plane_size_);
#pragma omp parallel for schedule(static) if (planes_ * plane_size_ >= kParallelMin)
    for (int64_t p = 0; p < planes_; ++p) {
      const float g = dy[p] * scale;
      for (int64_t i = 0; i < plane_size_; ++i) dx[p * plane_size_ + i] = g;
    }
    return absl::OkStatus();
  }

 private:
  int64_t planes_, plane_size_;
};

class MaxPoolGradKernel : public Kernel {
 public:
  MaxPoolGradKernel(Shape x, Window2d window) : x_(std::move(x)), window_(window) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
    const int64_t planes = x_[0] * x_[1], h = x_[2], w = x_[3];
    const int64_t oh = window_.output[0], ow = window_.output[1];
#pragma omp parallel for schedule(static) if (planes * h * w >= kParallelMin)
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = x + p * h * w;
      const float* dyp = dy + p * oh * ow;
      float* dxp = dx + p * h * w;
      std::memset(dxp, 0, sizeof(float) * h * w);
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          int64_t best = -1;
          for (int64_t ki = 0; ki < window_.kernel[0]; ++ki) {
            const int64_t r = i * window_.strides[0] - window_.pads_begin[0] +
                              ki * window_.dilations[0];
            if (r < 0 || r >= h) continue;
            for (int64_t kj = 0; kj < window_.kernel[1]; ++kj) {
              const int64_t c = j * window_.strides[1] - window_.pads_begin[1] +
                                kj * window_.dilations[1];
              if (c < 0 || c >= w) continue;
              // Strictly greater: ties go to the first maximum, as in PyTorch.
              if (best < 0 || xp[r * w + c] > xp[best]) best = r * w + c;
            }
          }
          if (best >= 0) dxp[best] += dyp[i * ow + j];
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  Shape x_;
  Window2d window_;
};

// Sums dY over the dimensions along which `like` was broadcast: each element
// of dY adds into the element of the output it was broadcast from.
class SumToShapeKernel : public Kernel {
 public:
  SumToShapeKernel(const Shape& gradient, const Shape& like) : size_(NumElements(gradient)) {
    // Output strides aligned with dY's dimensions; 0 where `like` broadcast.
    const size_t rank = gradient.size();
    const size_t offset = rank - like.size();
    dims_ = gradient;
    strides_.assign(rank, 0);
    int64_t stride = 1;
    for (size_t d = rank; d-- > offset;) {
      const int64_t extent = like[d - offset];
      strides_[d] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
    out_size_ = stride;
  }

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* dy = static_cast<const float*>(inputs[0]);
    float* out = static_cast<float*>(outputs[0]);
    std::memset(out, 0, sizeof(float) * out_size_);
    std::vector<int64_t> index(dims_.size(), 0);
    int64_t target = 0;
    for (int64_t i = 0; i < size_; ++i) {
      out[target] += dy[i];
      // Advance the row-major index of dY, keeping `target` in step.
      for (size_t d = dims_.size(); d-- > 0;) {
        target += strides_[d];
        if (++index[d] < dims_[d]) break;
        target -= strides_[d] * dims_[d];
        index[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  int64_t out_size_ = 1;
  Shape dims_;
  std::vector<int64_t> strides_;
};

}  // namespace

KernelOrStatus MakeReluGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(float alpha, FloatAttribute(spec, "alpha", 0.0f));
  return std::make_unique<ReluGradKernel>(NumElements(spec.inputs[0]->shape), alpha);
}

KernelOrStatus MakeClipGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  float bounds[2] = {-std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 2; ++i) {
    if (const Tensor* bound = ConstantInput(spec, 2 + i)) bounds[i] = *bound->data<float>();
  }
  return std::make_unique<ClipGradKernel>(NumElements(spec.inputs[0]->shape), bounds[0],
                                          bounds[1]);
}

KernelOrStatus MakeSoftmaxGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  KernelSpec forward = spec;
  forward.inputs.resize(1);
  forward.constant_inputs.resize(spec.constant_inputs.empty() ? 0 : 1);
  REPLICAD_ASSIGN_OR_RETURN(SoftmaxLayout layout, ParseSoftmaxLayout(forward));
  return std::make_unique<SoftmaxGradKernel>(layout, spec.op_type == kLogSoftmaxGrad);
}

KernelOrStatus MakeGlobalAveragePoolGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  const Shape& x = spec.inputs[0]->shape;
  const int64_t planes = x[0] * x[1];
  return std::make_unique<GlobalAveragePoolGradKernel>(planes,
                                                       planes == 0 ? 0 : NumElements(x) / planes);
}

KernelOrStatus MakeMaxPoolGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  KernelSpec forward = spec;
  forward.inputs.resize(1);
  forward.constant_inputs.resize(spec.constant_inputs.empty() ? 0 : 1);
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(forward));
  return std::make_unique<MaxPoolGradKernel>(spec.inputs[0]->shape, window);
}

KernelOrStatus MakeSumToShapeKernel(const KernelSpec& spec, CpuKernelContext&) {
  return std::make_unique<SumToShapeKernel>(spec.inputs[0]->shape, spec.inputs[1]->shape);
}

}  // namespace replicad
