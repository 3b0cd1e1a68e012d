// The training-only operators (core/ops/training_ops.h) on CUDA slots, as
// the CPU kernels compute them (core/backends/cpu/kernels/gradient_kernels.cc,
// loss_kernels.cc, dropout_train_kernel.cc): same conventions (sums, not
// means), same masks bit for bit, and reductions in an order fixed when the
// kernel is built, so replicas given the same data stay identical.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/training_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/dropout_mask.h"
#include "core/ops/dropout_train_attributes.h"
#include "core/ops/index_map.h"
#include "core/ops/op_util.h"
#include "core/ops/slice_pad_attributes.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

class ReluGradKernel : public Kernel {
 public:
  ReluGradKernel(const CudaKernelContext& context, int64_t n, float alpha)
      : context_(context), n_(n), alpha_(alpha) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchReluGrad(static_cast<const float*>(inputs[0]), static_cast<const float*>(inputs[1]),
                   static_cast<float*>(outputs[0]), n_, alpha_, context_.stream);
    return LastLaunchStatus(context_.device, "ReluGradKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
  float alpha_;
};

class ClipGradKernel : public Kernel {
 public:
  ClipGradKernel(const CudaKernelContext& context, int64_t n, float min, float max)
      : context_(context), n_(n), min_(min), max_(max) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchClipGrad(static_cast<const float*>(inputs[0]), static_cast<const float*>(inputs[1]),
                   static_cast<float*>(outputs[0]), n_, min_, max_, context_.stream);
    return LastLaunchStatus(context_.device, "ClipGradKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
  float min_, max_;
};

// The step's key is made on the host in Run, while the run context is
// valid, and handed to the device by value.
class DropoutTrainKernel : public Kernel {
 public:
  // Its launches carry the step (a replay would repeat the last one's).
  bool replayable() const override { return false; }
  DropoutTrainKernel(const CudaKernelContext& context, int64_t rows, int64_t row_size, float ratio,
                     uint64_t node_seed)
      : context_(context), rows_(rows), row_size_(row_size), ratio_(ratio), node_seed_(node_seed) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    // The same float expression as the CPU kernel's, so the kept value matches.
    const float keep_scale = ratio_ < 1.0f ? 1.0f / (1.0f - ratio_) : 0.0f;
    LaunchDropoutTrain(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]),
                       static_cast<float*>(outputs[1]), rows_, row_size_, ratio_, keep_scale,
                       DropoutStepKey(run.seed, static_cast<uint64_t>(run.step), node_seed_),
                       run.first_row, context_.stream);
    return LastLaunchStatus(context_.device, "DropoutTrainKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t rows_, row_size_;
  float ratio_;
  uint64_t node_seed_;
};

// A SumToShape whose reduction is trivial: a copy (nothing was broadcast) or
// zeros (it was broadcast from an empty dim).
class SumToShapeCopyKernel : public Kernel {
 public:
  SumToShapeCopyKernel(const CudaKernelContext& context, size_t bytes, bool zeros)
      : context_(context), bytes_(bytes), zeros_(zeros) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (zeros_) {
      REPLICAD_CUDA_RETURN_IF_ERROR(context_.device,
                                    cudaMemsetAsync(outputs[0], 0, bytes_, context_.stream));
    } else {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          context_.device, cudaMemcpyAsync(outputs[0], inputs[0], bytes_, cudaMemcpyDeviceToDevice,
                                           context_.stream));
    }
    return absl::OkStatus();
  }

 private:
  const CudaKernelContext& context_;
  size_t bytes_;
  bool zeros_;
};

class SumToShapeKernel : public Kernel {
 public:
  SumToShapeKernel(const CudaKernelContext& context, const SumToShapeLayout& layout)
      : context_(context), layout_(layout) {}

  size_t workspace_bytes() const override {
    return layout_.splits > 1 ? static_cast<size_t>(layout_.n_out) * layout_.splits * sizeof(float)
                              : 0;
  }
  void SetWorkspace(void* workspace) override { partial_ = static_cast<float*>(workspace); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchSumToShape(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]), layout_,
                     partial_, context_.stream);
    return LastLaunchStatus(context_.device, "SumToShapeKernel");
  }

 private:
  const CudaKernelContext& context_;
  SumToShapeLayout layout_;
  float* partial_ = nullptr;
};

// dY [outer, total, inner] cut along the axis: for each input, one strided
// 2-D copy of its block out of every dY row (Concat's copies, reversed).
class ConcatGradKernel : public Kernel {
 public:
  ConcatGradKernel(const CudaKernelContext& context, int64_t outer, std::vector<size_t> block_bytes)
      : context_(context), outer_(outer), block_bytes_(std::move(block_bytes)) {
    for (size_t bytes : block_bytes_) row_bytes_ += bytes;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const char* dy = static_cast<const char*>(inputs[0]);
    for (size_t i = 0; i < block_bytes_.size(); ++i) {
      const size_t bytes = block_bytes_[i];
      if (bytes == 0) continue;
      REPLICAD_CUDA_RETURN_IF_ERROR(
          context_.device, cudaMemcpy2DAsync(outputs[i], bytes, dy, row_bytes_, bytes, outer_,
                                             cudaMemcpyDeviceToDevice, context_.stream));
      dy += bytes;
    }
    return absl::OkStatus();
  }

 private:
  const CudaKernelContext& context_;
  int64_t outer_;
  std::vector<size_t> block_bytes_;
  size_t row_bytes_ = 0;
};

class PadGradKernel : public Kernel {
 public:
  PadGradKernel(const CudaKernelContext& context, int64_t n, PadGradTables tables,
                std::shared_ptr<Buffer> table)
      : context_(context), n_(n), tables_(tables), table_(std::move(table)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchPadGrad(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]), n_,
                  tables_, context_.stream);
    return LastLaunchStatus(context_.device, "PadGradKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
  PadGradTables tables_;
  std::shared_ptr<Buffer> table_;  // tables_.table points into it.
};

// Workspace: the first bad label's row (a flag), then each row's loss and
// correctness, summed over rows by a second kernel in a fixed order.
//
// A label out of range must fail the step with the CPU kernel's message, so
// with int64 labels Run waits for the stream and reads the flag: one wait per
// step at the end of the forward pass, where the loss is read anyway.
class SoftmaxCrossEntropyKernel : public Kernel {
 public:
  SoftmaxCrossEntropyKernel(const CudaKernelContext& context, int64_t rows, int64_t classes,
                            bool labels)
      : context_(context), rows_(rows), classes_(classes), labels_(labels) {}

  size_t workspace_bytes() const override {
    return sizeof(uint64_t) + static_cast<size_t>(rows_) * (sizeof(double) + sizeof(uint64_t));
  }
  void SetWorkspace(void* workspace) override { workspace_ = static_cast<char*>(workspace); }

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    uint64_t* bad_row = reinterpret_cast<uint64_t*>(workspace_);
    double* row_loss = reinterpret_cast<double*>(workspace_ + sizeof(uint64_t));
    uint64_t* row_correct = reinterpret_cast<uint64_t*>(row_loss + rows_);
    const int64_t* labels = labels_ ? static_cast<const int64_t*>(inputs[1]) : nullptr;
    const float* probabilities = labels_ ? nullptr : static_cast<const float*>(inputs[1]);
    // Labels the trainer checked on the host need no check here, and the
    // step no wait for the stream in its middle.
    const bool check_labels = labels_ && !run.targets_checked;
    if (check_labels) {
      // All bits set: UINT64_MAX, above every row.
      REPLICAD_CUDA_RETURN_IF_ERROR(
          context_.device, cudaMemsetAsync(bad_row, 0xFF, sizeof(uint64_t), context_.stream));
    }
    LaunchSoftmaxCrossEntropy(static_cast<const float*>(inputs[0]), labels, probabilities,
                              static_cast<float*>(outputs[2]), rows_, classes_, row_loss,
                              row_correct, bad_row, static_cast<float*>(outputs[0]),
                              static_cast<float*>(outputs[1]), context_.stream);
    REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(context_.device, "SoftmaxCrossEntropyKernel"));
    if (!check_labels) return absl::OkStatus();
    REPLICAD_CUDA_RETURN_IF_ERROR(context_.device,
                                  cudaMemcpyAsync(&host_bad_row_, bad_row, sizeof(uint64_t),
                                                  cudaMemcpyDeviceToHost, context_.stream));
    REPLICAD_CUDA_RETURN_IF_ERROR(context_.device, cudaStreamSynchronize(context_.stream));
    if (host_bad_row_ == std::numeric_limits<uint64_t>::max()) return absl::OkStatus();
    const int64_t row = static_cast<int64_t>(host_bad_row_);
    int64_t label = 0;
    REPLICAD_CUDA_RETURN_IF_ERROR(context_.device,
                                  cudaMemcpyAsync(&label, labels + row, sizeof(int64_t),
                                                  cudaMemcpyDeviceToHost, context_.stream));
    REPLICAD_CUDA_RETURN_IF_ERROR(context_.device, cudaStreamSynchronize(context_.stream));
    // Named by its row in the whole batch, not in this slot's slice, as on the CPU.
    return absl::InvalidArgumentError(absl::StrCat("targets[", run.first_row + row,
                                                   "] must be a class in [0, ", classes_,
                                                   "), received ", label));
  }

 private:
  const CudaKernelContext& context_;
  int64_t rows_, classes_;
  bool labels_;
  char* workspace_ = nullptr;
  uint64_t host_bad_row_ = 0;
};

class MeanSquaredErrorKernel : public Kernel {
 public:
  MeanSquaredErrorKernel(const CudaKernelContext& context, int64_t n, int64_t row_size)
      : context_(context), n_(n), scale_(1.0 / static_cast<double>(row_size)) {}

  size_t workspace_bytes() const override {
    return static_cast<size_t>(MeanSquaredErrorPartials(n_)) * sizeof(double);
  }
  void SetWorkspace(void* workspace) override { partial_ = static_cast<double*>(workspace); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchMeanSquaredError(static_cast<const float*>(inputs[0]),
                           static_cast<const float*>(inputs[1]), static_cast<float*>(outputs[1]),
                           n_, scale_, partial_, static_cast<float*>(outputs[0]), context_.stream);
    return LastLaunchStatus(context_.device, "MeanSquaredErrorKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
  double scale_;
  double* partial_ = nullptr;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many chunks each output's reduction is cut into: enough for `target`
// threads or blocks in all, each chunk keeping at least `min_chunk` elements
// (the extra pass over partial sums must not cost more than it saves).
int ChooseSplits(int64_t n_out, int64_t n_reduced, int64_t target, int64_t min_chunk) {
  const int64_t wanted = CeilDiv(target, n_out);
  const int64_t allowed = std::max<int64_t>(1, n_reduced / min_chunk);
  return static_cast<int>(std::clamp<int64_t>(std::min(wanted, allowed), 1, 65535));
}

}  // namespace

KernelOrStatus MakeCudaActivationGradKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const int64_t n = NumElements(spec.inputs[0]->shape);
  if (spec.op_type == kReluGrad) {
    REPLICAD_ASSIGN_OR_RETURN(float alpha, FloatAttribute(spec, "alpha", 0.0f));
    return std::make_unique<ReluGradKernel>(context, n, alpha);
  }
  // The shape rule accepts only bounds known when the plan is made.
  float bounds[2] = {-std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 2; ++i) {
    if (const Tensor* bound = ConstantInput(spec, 2 + i)) bounds[i] = *bound->data<float>();
  }
  return std::make_unique<ClipGradKernel>(context, n, bounds[0], bounds[1]);
}

KernelOrStatus MakeCudaDropoutTrainKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(DropoutTrainAttributes a, ParseDropoutTrainAttributes(spec));
  return std::make_unique<DropoutTrainKernel>(context, a.rows, a.row_size, a.ratio, a.node_seed);
}

// dY's dims, without those of size 1, merged into runs that are all kept
// (Like has the dim) or all reduced (Like has 1 there or lacks the dim):
// adjacent row-major dims merge into one of their product.
KernelOrStatus MakeCudaSumToShapeKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const Shape& dy = spec.inputs[0]->shape;
  const Shape& like = spec.inputs[1]->shape;
  const size_t rank = dy.size();
  const size_t offset = rank - like.size();
  const std::vector<int64_t> strides = RowMajorStrides(dy);
  struct DimRun {
    int64_t extent, stride;
    bool reduced;
  };
  std::vector<DimRun> runs;
  for (size_t d = 0; d < rank; ++d) {
    if (dy[d] == 1) continue;
    const bool reduced = d < offset || like[d - offset] == 1;
    if (!runs.empty() && runs.back().reduced == reduced) {
      runs.back().extent *= dy[d];
      runs.back().stride = strides[d];
    } else {
      runs.push_back(DimRun{dy[d], strides[d], reduced});
    }
  }
  SumToShapeLayout layout;
  for (const DimRun& run : runs) {
    int& count = run.reduced ? layout.reduced_rank : layout.kept_rank;
    if (count == kMaxRank) {
      return NodeUnimplemented(
          spec, absl::StrCat("the CUDA backend sums over at most ", kMaxRank,
                             " separate runs of broadcast dims; dY ", ShapeToString(dy),
                             " against ", ShapeToString(like), " has more"));
    }
    int64_t* dims = run.reduced ? layout.reduced_dims : layout.kept_dims;
    int64_t* run_strides = run.reduced ? layout.reduced_strides : layout.kept_strides;
    dims[count] = run.extent;
    run_strides[count] = run.stride;
    ++count;
    (run.reduced ? layout.n_reduced : layout.n_out) *= run.extent;
  }
  const size_t out_bytes = static_cast<size_t>(layout.n_out) * sizeof(float);
  // No outputs (a kept dim of 0) writes nothing: ChooseSplits divides by n_out.
  if (layout.n_reduced <= 1 || layout.n_out == 0) {
    return std::make_unique<SumToShapeCopyKernel>(context, out_bytes, layout.n_reduced == 0);
  }
  // Outputs contiguous in dY (a bias over the batch): one thread each reads
  // coalesced. Otherwise (a per-channel sum over [N, C, H, W], a whole-tensor
  // sum) a block per output strides over its contiguous reduced elements.
  layout.thread_per_output = !runs.back().reduced && runs.back().extent >= 32;
  layout.splits = layout.thread_per_output
                      ? ChooseSplits(layout.n_out, layout.n_reduced, int64_t{1} << 16, 32)
                      : ChooseSplits(layout.n_out, layout.n_reduced, 1024, 2048);
  return std::make_unique<SumToShapeKernel>(context, layout);
}

KernelOrStatus MakeCudaConcatGradKernel(const KernelSpec& spec, CudaKernelContext& context) {
  // Concat's layout with dY as its output.
  KernelSpec forward = WithoutFirstInput(spec);
  forward.outputs = {*spec.inputs[0]};
  REPLICAD_ASSIGN_OR_RETURN(ConcatLayout layout, ParseConcatLayout(forward));
  return std::make_unique<ConcatGradKernel>(context, layout.outer, std::move(layout.block_bytes));
}

// Per dX dim, the dY indices each X index was read by (ascending), from the
// same PadSourceIndex the forward pass and the CPU kernel use.
KernelOrStatus MakeCudaPadGradKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.inputs[0]->dtype != DType::kFloat32) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes PadGrad on float32 "
                                                "only, received ",
                                                TensorTypeToString(*spec.inputs[0])));
  }
  const KernelSpec forward = WithoutFirstInput(spec);
  REPLICAD_ASSIGN_OR_RETURN(PadLayout layout, ParsePadLayout(forward));
  const Shape& x = forward.inputs[0]->shape;
  if (x.size() > static_cast<size_t>(kMaxRank)) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend pads tensors of rank up to ",
                                                kMaxRank, "; X has rank ", x.size()));
  }
  const std::vector<int64_t> y_strides = RowMajorStrides(layout.output);
  PadGradTables tables;
  tables.rank = static_cast<int>(x.size());
  std::vector<int64_t> table;
  for (size_t d = 0; d < x.size(); ++d) {
    std::vector<std::vector<int64_t>> readers(x[d]);
    for (int64_t out = 0; out < layout.output[d]; ++out) {
      const int64_t source =
          PadSourceIndex(layout.mode, out, layout.pads_begin[d], layout.pads_end[d], x[d]);
      if (source >= 0) readers[source].push_back(out * y_strides[d]);
    }
    tables.x_dims[d] = x[d];
    tables.bounds[d] = static_cast<int64_t>(table.size());
    table.resize(table.size() + x[d] + 1);
    for (int64_t i = 0; i < x[d]; ++i) {
      table[tables.bounds[d] + i] = static_cast<int64_t>(table.size());
      table.insert(table.end(), readers[i].begin(), readers[i].end());
    }
    table[tables.bounds[d] + x[d]] = static_cast<int64_t>(table.size());
  }
  if (table.empty()) table.push_back(0);
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                            UploadToDevice(context, table.data(), table.size() * sizeof(int64_t)));
  tables.table = static_cast<const int64_t*>(buffer->data());
  return std::make_unique<PadGradKernel>(context, NumElements(x), tables, std::move(buffer));
}

KernelOrStatus MakeCudaAllFiniteKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const int64_t n = NumElements(spec.inputs[0]->shape);
  return std::make_unique<LaunchKernel>(
      context, "AllFiniteKernel",
      [n](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchAllFinite(static_cast<const float*>(in[0]), n, static_cast<float*>(out[0]), stream);
      });
}

KernelOrStatus MakeCudaLossKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const Shape& y = spec.inputs[0]->shape;
  if (spec.op_type == kSoftmaxCrossEntropy) {
    return std::make_unique<SoftmaxCrossEntropyKernel>(context, y[0], y[1],
                                                       spec.inputs[1]->dtype == DType::kInt64);
  }
  const int64_t rows = y[0];
  const int64_t n = NumElements(y);
  return std::make_unique<MeanSquaredErrorKernel>(context, n, rows == 0 ? 1 : n / rows);
}

}  // namespace replicad
