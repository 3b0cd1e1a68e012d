// Backward kernels of training graphs that are plain loops: oneDNN's
// backward primitives would need the forward pass's workspace (max pooling)
// or bring nothing (an elementwise mask, a broadcast sum).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/index_map.h"
#include "core/ops/op_util.h"
#include "core/ops/slice_pad_attributes.h"
#include "core/ops/softmax_attributes.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

constexpr int64_t kParallelMin = 1 << 14;

class ReluGradKernel : public Kernel {
 public:
  ReluGradKernel(int64_t size, float alpha) : size_(size), alpha_(alpha) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
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

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
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

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
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

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
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

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
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
            const int64_t r =
                i * window_.strides[0] - window_.pads_begin[0] + ki * window_.dilations[0];
            if (r < 0 || r >= h) continue;
            for (int64_t kj = 0; kj < window_.kernel[1]; ++kj) {
              const int64_t c =
                  j * window_.strides[1] - window_.pads_begin[1] + kj * window_.dilations[1];
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

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
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

// dX of each window: dY / divisor on the window's elements inside X. The
// divisor is the forward pass's: with count_include_pad the window's cells
// within the padded extent (not a ceil_mode window's part past pads_end),
// else the cells inside X.
class AveragePoolGradKernel : public Kernel {
 public:
  AveragePoolGradKernel(Shape x, AveragePoolAttributes pool) : x_(std::move(x)), pool_(pool) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
    const Window2d& w = pool_.window;
    const int64_t planes = x_[0] * x_[1], h = x_[2], wd = x_[3];
    const int64_t oh = w.output[0], ow = w.output[1];
    std::memset(dx, 0, sizeof(float) * planes * h * wd);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t i = 0; i < oh; ++i) {
        const int64_t r0 = i * w.strides[0] - w.pads_begin[0], r1 = r0 + w.kernel[0];
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t c0 = j * w.strides[1] - w.pads_begin[1], c1 = c0 + w.kernel[1];
          const int64_t rows_in = std::min(r1, h) - std::max<int64_t>(r0, 0);
          const int64_t cols_in = std::min(c1, wd) - std::max<int64_t>(c0, 0);
          int64_t divisor = rows_in * cols_in;
          if (pool_.count_include_pad) {
            divisor =
                (std::min(r1, h + w.pads_end[0]) - r0) * (std::min(c1, wd + w.pads_end[1]) - c0);
          }
          if (divisor <= 0 || rows_in <= 0 || cols_in <= 0) continue;
          const float g = dy[(p * oh + i) * ow + j] / static_cast<float>(divisor);
          for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r1, h); ++r) {
            for (int64_t c = std::max<int64_t>(c0, 0); c < std::min(c1, wd); ++c) {
              dx[(p * h + r) * wd + c] += g;
            }
          }
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  Shape x_;
  AveragePoolAttributes pool_;
};

// Cuts dY [outer, total, inner] along the axis into the inputs' extents.
class ConcatGradKernel : public Kernel {
 public:
  ConcatGradKernel(int64_t outer, int64_t inner, std::vector<int64_t> extents)
      : outer_(outer), inner_(inner), extents_(std::move(extents)) {
    for (int64_t e : extents_) total_ += e;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* dy = static_cast<const float*>(inputs[0]);
    int64_t offset = 0;
    for (size_t i = 0; i < extents_.size(); ++i) {
      float* dx = static_cast<float*>(outputs[i]);
      const int64_t block = extents_[i] * inner_;
      for (int64_t o = 0; o < outer_; ++o) {
        std::memcpy(dx + o * block, dy + (o * total_ + offset) * inner_, sizeof(float) * block);
      }
      offset += extents_[i];
    }
    return absl::OkStatus();
  }

 private:
  int64_t outer_, inner_, total_ = 0;
  std::vector<int64_t> extents_;
};

// For each element of dY, the element of X it was read from (or none):
// separable per dim, so one table per dim, walked with a row-major index.
class PadGradKernel : public Kernel {
 public:
  PadGradKernel(Shape x, Shape y, std::vector<std::vector<int64_t>> sources)
      : x_(std::move(x)), y_(std::move(y)), sources_(std::move(sources)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* dy = static_cast<const float*>(inputs[0]);
    float* dx = static_cast<float*>(outputs[0]);
    std::memset(dx, 0, sizeof(float) * NumElements(x_));
    const int64_t count = NumElements(y_);
    const size_t rank = y_.size();
    std::vector<int64_t> index(rank, 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t target = 0;
      bool inside = true;
      for (size_t d = 0; d < rank && inside; ++d) {
        const int64_t source = sources_[d][index[d]];
        inside = source >= 0;
        target = target * x_[d] + source;
      }
      if (inside) dx[target] += dy[i];
      for (size_t d = rank; d-- > 0;) {
        if (++index[d] < y_[d]) break;
        index[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  Shape x_, y_;
  std::vector<std::vector<int64_t>> sources_;
};

// Slice backward: dX zero, then each dY element (row-major) written where
// the slice's index map read it.
class SliceGradKernel : public Kernel {
 public:
  SliceGradKernel(int64_t x_elements, IndexMap map)
      : x_elements_(x_elements), map_(std::move(map)), index_(map_.output.size(), 0) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* dy = static_cast<const float*>(inputs[0]);
    float* dx = static_cast<float*>(outputs[0]);
    std::fill(dx, dx + x_elements_, 0.0f);
    const int64_t total = NumElements(map_.output);
    const int rank = static_cast<int>(map_.output.size());
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t offset = 0;
      for (int d = 0; d < rank; ++d) offset += map_.offsets[d][index_[d]];
      dx[offset] = dy[i];
      for (int d = rank - 1; d >= 0; --d) {
        if (++index_[d] < map_.output[d]) break;
        index_[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t x_elements_;
  IndexMap map_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
};

}  // namespace

KernelOrStatus MakeSliceGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  KernelSpec forward = WithoutFirstInput(spec);
  forward.op_type = "Slice";
  forward.outputs = {*spec.inputs[0]};
  REPLICAD_ASSIGN_OR_RETURN(IndexMap map, SliceIndexMap(forward));
  if (spec.outputs[0].dtype != DType::kFloat32) {
    return NodeUnimplemented(spec, "only float32 gradients are computed");
  }
  return std::make_unique<SliceGradKernel>(NumElements(spec.outputs[0].shape), std::move(map));
}

KernelOrStatus MakePadGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  const KernelSpec forward = WithoutFirstInput(spec);
  REPLICAD_ASSIGN_OR_RETURN(PadLayout layout, ParsePadLayout(forward));
  const Shape& x = forward.inputs[0]->shape;
  std::vector<std::vector<int64_t>> sources(x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    for (int64_t out = 0; out < layout.output[d]; ++out) {
      sources[d].push_back(
          PadSourceIndex(layout.mode, out, layout.pads_begin[d], layout.pads_end[d], x[d]));
    }
  }
  return std::make_unique<PadGradKernel>(x, layout.output, std::move(sources));
}

KernelOrStatus MakeAveragePoolGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  const KernelSpec forward = ForwardInputs(spec, 1);
  REPLICAD_ASSIGN_OR_RETURN(AveragePoolAttributes pool, ParseAveragePoolAttributes(forward));
  // The window walk below steps by 1; a dilated pool's gradient would land
  // on the wrong elements.
  if (pool.window.dilations[0] != 1 || pool.window.dilations[1] != 1) {
    return NodeUnimplemented(spec, "the gradient of a dilated AveragePool is not implemented");
  }
  return std::make_unique<AveragePoolGradKernel>(spec.inputs[0]->shape, pool);
}

KernelOrStatus MakeConcatGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  const KernelSpec forward = WithoutFirstInput(spec);
  REPLICAD_ASSIGN_OR_RETURN(int64_t axis, ParseConcatAxis(forward));
  const Shape& y = spec.inputs[0]->shape;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= y[d];
  for (size_t d = axis + 1; d < y.size(); ++d) inner *= y[d];
  std::vector<int64_t> extents;
  for (const std::optional<TensorType>& input : forward.inputs)
    extents.push_back(input->shape[axis]);
  return std::make_unique<ConcatGradKernel>(outer, inner, std::move(extents));
}

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
  return std::make_unique<ClipGradKernel>(NumElements(spec.inputs[0]->shape), bounds[0], bounds[1]);
}

KernelOrStatus MakeSoftmaxGradKernel(const KernelSpec& spec, CpuKernelContext&) {
  const KernelSpec forward = ForwardInputs(spec, 1);
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
  const KernelSpec forward = ForwardInputs(spec, 1);
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(forward));
  return std::make_unique<MaxPoolGradKernel>(spec.inputs[0]->shape, window);
}

KernelOrStatus MakeSumToShapeKernel(const KernelSpec& spec, CpuKernelContext&) {
  return std::make_unique<SumToShapeKernel>(spec.inputs[0]->shape, spec.inputs[1]->shape);
}

}  // namespace replicad
