#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_util.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/conv_transpose_attributes.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

Dims4 ToDims4(const Shape& shape) { return {shape[0], shape[1], shape[2], shape[3]}; }

// The descriptors of one convolution. For ConvTranspose, which cuDNN
// computes as the data gradient of the forward convolution from Y to X, `x`
// describes the ONNX input X (cuDNN's dy) and `y` the output (cuDNN's dx).
struct ConvDescriptors {
  CudnnTensorDescriptor x;
  CudnnTensorDescriptor y;
  CudnnTensorDescriptor bias;  // [1, M, 1, 1], created only with a bias.
  CudnnFilterDescriptor w;
  CudnnConvolutionDescriptor conv;
};

struct ConvGeometry {
  std::array<int64_t, 2> pads{};  // One per spatial dim: cuDNN pads both sides alike.
  std::array<int64_t, 2> strides{};
  std::array<int64_t, 2> dilations{};
  int64_t group = 1;
};

// `x`, `w` and `y` are the dims of the tensors the descriptors describe (see
// ConvDescriptors for ConvTranspose). The math type is the caller's to set.
absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeDescriptors(const std::string& device,
                                                                 const Dims4& x, const Dims4& w,
                                                                 const Dims4& y, bool has_bias,
                                                                 const ConvGeometry& geometry) {
  auto d = std::make_unique<ConvDescriptors>();
  REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device, d->x, x));
  REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device, d->y, y));
  if (has_bias) REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device, d->bias, {1, y[1], 1, 1}));
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateFilterDescriptor(d->w.receive()));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetFilter4dDescriptor(d->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                         static_cast<int>(w[0]), static_cast<int>(w[1]),
                                         static_cast<int>(w[2]), static_cast<int>(w[3])));
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateConvolutionDescriptor(d->conv.receive()));
  // ONNX's Conv is a cross-correlation; its dilations count like cuDNN's
  // (1 = dense).
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device,
      cudnnSetConvolution2dDescriptor(
          d->conv.get(), static_cast<int>(geometry.pads[0]), static_cast<int>(geometry.pads[1]),
          static_cast<int>(geometry.strides[0]), static_cast<int>(geometry.strides[1]),
          static_cast<int>(geometry.dilations[0]), static_cast<int>(geometry.dilations[1]),
          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetConvolutionGroupCount(d->conv.get(), static_cast<int>(geometry.group)));
  return d;
}

// The forward output dims cuDNN derives from `input`, `w` and the
// convolution, for checking that they are the ones the node needs.
absl::StatusOr<Dims4> CudnnForwardDims(const std::string& device, const ConvDescriptors& d,
                                       cudnnTensorDescriptor_t input) {
  int n = 0, c = 0, h = 0, w = 0;
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnGetConvolution2dForwardOutputDim(
                                            d.conv.get(), input, d.w.get(), &n, &c, &h, &w));
  return Dims4{n, c, h, w};
}

// An algorithm picked for one convolution and the workspace it needs.
struct AlgorithmChoice {
  int algorithm = 0;  // A cudnnConvolutionFwdAlgo_t or cudnnConvolutionBwdDataAlgo_t.
  size_t workspace_bytes = 0;
};

// Choices by convolution for the whole process: plans are made per batch
// size and per slot, and the same layer shape should not query cuDNN again.
class AlgorithmCache {
 public:
  static AlgorithmCache& Get() {
    static AlgorithmCache* const cache = new AlgorithmCache;
    return *cache;
  }

  std::optional<AlgorithmChoice> Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }

  // Keeps the first choice stored under `key` (two slots may choose at once;
  // the heuristics answer both alike) and returns it.
  AlgorithmChoice Insert(const std::string& key, const AlgorithmChoice& choice) {
    absl::MutexLock lock(&mu_);
    return choices_.emplace(key, choice).first->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, AlgorithmChoice> choices_ ABSL_GUARDED_BY(mu_);
};

std::string CacheKey(absl::string_view kind, const CudaKernelContext& context, const Dims4& x,
                     const Dims4& w, const Dims4& y, const ConvGeometry& g) {
  return absl::StrCat(kind, " ", context.device, " x[", absl::StrJoin(x, ","), "] w[",
                      absl::StrJoin(w, ","), "] y[", absl::StrJoin(y, ","), "] pads[",
                      absl::StrJoin(g.pads, ","), "] strides[", absl::StrJoin(g.strides, ","),
                      "] dilations[", absl::StrJoin(g.dilations, ","), "] group ", g.group,
                      " tf32 ", context.tf32, " max_workspace ", context.max_workspace_bytes);
}

// The first of cuDNN's heuristic results (best first) that runs this
// convolution within the workspace limit. `workspace(algo, &bytes)` asks
// cuDNN for an algorithm's exact need under the descriptor's math type; an
// algorithm it rejects is passed over.
template <typename Perf, typename WorkspaceFn>
std::optional<AlgorithmChoice> FirstFitting(const std::vector<Perf>& results,
                                            size_t max_workspace_bytes, WorkspaceFn workspace) {
  for (const Perf& perf : results) {
    if (perf.status != CUDNN_STATUS_SUCCESS || perf.memory > max_workspace_bytes) continue;
    size_t bytes = 0;
    if (!workspace(perf.algo, &bytes).ok() || bytes > max_workspace_bytes) continue;
    return AlgorithmChoice{static_cast<int>(perf.algo), bytes};
  }
  return std::nullopt;
}

// TF32 tensor cores when the slot allows them; FMA math excludes them (and
// cuDNN's default math may use them for float32).
absl::Status SetMathType(const CudaKernelContext& context, const ConvDescriptors& d) {
  REPLICAD_CUDA_RETURN_IF_ERROR(
      context.device, cudnnSetConvolutionMathType(
                          d.conv.get(), context.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  return absl::OkStatus();
}

absl::Status NoAlgorithm(const KernelSpec& spec, const CudaKernelContext& context) {
  return NodeUnimplemented(
      spec,
      absl::StrCat("cuDNN offers no algorithm for this convolution within the workspace "
                   "limit of ",
                   context.max_workspace_bytes, " bytes", context.tf32 ? "" : " in FMA math"));
}

// Sets the math type of `d` and picks an algorithm through the cache:
// `heuristics(&results)` lists cuDNN's candidates for the direction (best
// first) and `workspace(algo, &bytes)` asks one's exact need.
template <typename Perf, typename HeuristicsFn, typename WorkspaceFn>
absl::StatusOr<AlgorithmChoice> Choose(const KernelSpec& spec, CudaKernelContext& context,
                                       const ConvDescriptors& d, const std::string& key,
                                       HeuristicsFn heuristics, WorkspaceFn workspace) {
  REPLICAD_RETURN_IF_ERROR(SetMathType(context, d));
  std::optional<AlgorithmChoice> choice = AlgorithmCache::Get().Find(key);
  if (!choice.has_value()) {
    std::vector<Perf> results;
    REPLICAD_RETURN_IF_ERROR(heuristics(&results));
    choice = FirstFitting(results, context.max_workspace_bytes, workspace);
    if (!choice.has_value()) return NoAlgorithm(spec, context);
    choice = AlgorithmCache::Get().Insert(key, *choice);
  }
  return *choice;
}

absl::StatusOr<AlgorithmChoice> ChooseForward(const KernelSpec& spec, CudaKernelContext& context,
                                              const ConvDescriptors& d, const std::string& key) {
  const std::string& device = context.device;
  auto heuristics = [&](std::vector<cudnnConvolutionFwdAlgoPerf_t>* results) -> absl::Status {
    int max_count = 0;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device, cudnnGetConvolutionForwardAlgorithmMaxCount(context.cudnn, &max_count));
    results->resize(max_count);
    int returned = 0;
    REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnGetConvolutionForwardAlgorithm_v7(
                                              context.cudnn, d.x.get(), d.w.get(), d.conv.get(),
                                              d.y.get(), max_count, &returned, results->data()));
    results->resize(returned);
    return absl::OkStatus();
  };
  auto workspace = [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
    return CudaCallStatus(
        cudnnGetConvolutionForwardWorkspaceSize(context.cudnn, d.x.get(), d.w.get(), d.conv.get(),
                                                d.y.get(), algo, bytes),
        device, "cudnnGetConvolutionForwardWorkspaceSize");
  };
  return Choose<cudnnConvolutionFwdAlgoPerf_t>(spec, context, d, key, heuristics, workspace);
}

// The same for the data gradient that computes ConvTranspose.
absl::StatusOr<AlgorithmChoice> ChooseBackwardData(const KernelSpec& spec,
                                                   CudaKernelContext& context,
                                                   const ConvDescriptors& d,
                                                   const std::string& key) {
  const std::string& device = context.device;
  auto heuristics = [&](std::vector<cudnnConvolutionBwdDataAlgoPerf_t>* results) -> absl::Status {
    int max_count = 0;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(context.cudnn, &max_count));
    results->resize(max_count);
    int returned = 0;
    REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                              context.cudnn, d.w.get(), d.x.get(), d.conv.get(),
                                              d.y.get(), max_count, &returned, results->data()));
    results->resize(returned);
    return absl::OkStatus();
  };
  auto workspace = [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
    return CudaCallStatus(
        cudnnGetConvolutionBackwardDataWorkspaceSize(context.cudnn, d.w.get(), d.x.get(),
                                                     d.conv.get(), d.y.get(), algo, bytes),
        device, "cudnnGetConvolutionBackwardDataWorkspaceSize");
  };
  return Choose<cudnnConvolutionBwdDataAlgoPerf_t>(spec, context, d, key, heuristics, workspace);
}

// Conv (forward) or ConvTranspose (data gradient), then the bias, then for
// Conv the fused residual sum and activation in place on the output.
class CudnnConvKernel : public Kernel {
 public:
  CudnnConvKernel(const CudaKernelContext& context, std::unique_ptr<ConvDescriptors> descriptors,
                  bool transposed, AlgorithmChoice choice, bool has_bias, bool fused_sum,
                  CudaUnary activation, int64_t output_elements)
      : device_(context.device),
        cudnn_(context.cudnn),
        stream_(context.stream),
        d_(std::move(descriptors)),
        transposed_(transposed),
        choice_(choice),
        has_bias_(has_bias),
        fused_sum_(fused_sum),
        activation_(activation),
        output_elements_(output_elements) {}

  size_t workspace_bytes() const override { return choice_.workspace_bytes; }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float one = 1.0f;
    const float zero = 0.0f;
    float* y = static_cast<float*>(outputs[0]);
    if (transposed_) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnConvolutionBackwardData(
                       cudnn_, &one, d_->w.get(), inputs[1], d_->x.get(), inputs[0], d_->conv.get(),
                       static_cast<cudnnConvolutionBwdDataAlgo_t>(choice_.algorithm), workspace_,
                       choice_.workspace_bytes, &zero, d_->y.get(), y));
    } else {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnConvolutionForward(
                       cudnn_, &one, d_->x.get(), inputs[0], d_->w.get(), inputs[1], d_->conv.get(),
                       static_cast<cudnnConvolutionFwdAlgo_t>(choice_.algorithm), workspace_,
                       choice_.workspace_bytes, &zero, d_->y.get(), y));
    }
    if (has_bias_) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          device_, cudnnAddTensor(cudnn_, &one, d_->bias.get(), inputs[2], &one, d_->y.get(), y));
    }
    if (fused_sum_) {
      LaunchAddUnary(y, static_cast<const float*>(inputs[3]), output_elements_, activation_,
                     stream_);
      return LastLaunchStatus(device_, "LaunchAddUnary");
    }
    if (activation_.op != CudaUnaryOp::kIdentity) {
      LaunchUnary(y, y, output_elements_, activation_, stream_);
      return LastLaunchStatus(device_, "LaunchUnary");
    }
    return absl::OkStatus();
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudaStream_t stream_;
  std::unique_ptr<ConvDescriptors> d_;
  bool transposed_;
  AlgorithmChoice choice_;
  bool has_bias_;
  bool fused_sum_;
  CudaUnary activation_;
  int64_t output_elements_;
  void* workspace_ = nullptr;
};

}  // namespace

KernelOrStatus MakeCudaConvKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(spec));
  const Window2d& window = conv.window;
  const Dims4 x = ToDims4(spec.inputs[0]->shape);
  const Dims4 w = ToDims4(spec.inputs[1]->shape);
  const Dims4 y = ToDims4(spec.outputs[0].shape);
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN convolutions take", {x, w, y}));

  // cuDNN pads both sides of a dim alike. Padding pads_begin on both sides
  // gives the same windows whenever it gives the same output size: the
  // windows start at the same offsets, and padding reads zeros either way.
  for (int i = 0; i < 2; ++i) {
    const int64_t dilated = (window.kernel[i] - 1) * window.dilations[i] + 1;
    const int64_t span = x[2 + i] + 2 * window.pads_begin[i] - dilated;
    if (span < 0 || span / window.strides[i] + 1 != window.output[i]) {
      return NodeUnimplemented(
          spec,
          absl::StrCat("cuDNN pads both sides of a spatial dim alike; pads [", window.pads_begin[0],
                       ",", window.pads_begin[1], ",", window.pads_end[0], ",", window.pads_end[1],
                       "] (begin h, w, end h, w) give different windows"));
    }
  }
  ConvGeometry geometry;
  geometry.pads = window.pads_begin;
  geometry.strides = window.strides;
  geometry.dilations = window.dilations;
  geometry.group = conv.group;

  REPLICAD_ASSIGN_OR_RETURN(std::optional<FusedActivation> fused,
                            ReadFusedActivation(*spec.attributes));
  REPLICAD_ASSIGN_OR_RETURN(CudaUnary activation, FusedUnary(fused));
  const bool has_bias = HasInput(spec, 2);
  const bool fused_sum = HasFusedSum(*spec.attributes);

  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ConvDescriptors> d,
                            MakeDescriptors(context.device, x, w, y, has_bias, geometry));
  REPLICAD_ASSIGN_OR_RETURN(Dims4 cudnn_y, CudnnForwardDims(context.device, *d, d->x.get()));
  if (cudnn_y != y) {
    return absl::InternalError(absl::StrCat(NodeLabel(spec), ": cuDNN computes output [",
                                            absl::StrJoin(cudnn_y, ","), "], the node needs [",
                                            absl::StrJoin(y, ","), "]"));
  }
  REPLICAD_ASSIGN_OR_RETURN(
      AlgorithmChoice choice,
      ChooseForward(spec, context, *d, CacheKey("forward", context, x, w, y, geometry)));
  return std::make_unique<CudnnConvKernel>(context, std::move(d), /*transposed=*/false, choice,
                                           has_bias, fused_sum, activation,
                                           NumElements(spec.outputs[0].shape));
}

// ConvTranspose is the data gradient of the convolution from its output Y
// to its input X: cuDNN's dy is X, its dx is Y, and ONNX's W [C, M/group,
// kH, kW] is that convolution's filter as it stands.
KernelOrStatus MakeCudaConvTransposeKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConvTransposeAttributes conv, ParseConvTransposeAttributes(spec));
  const Dims4 x = ToDims4(spec.inputs[0]->shape);
  const Dims4 w = ToDims4(spec.inputs[1]->shape);
  const Dims4 y = ToDims4(spec.outputs[0].shape);
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN convolutions take", {x, w, y}));

  // With padding pads_begin on both sides, Y's row o receives X's row i
  // through kernel row k where o = i * stride + k * dilation - pads_begin,
  // as ONNX's ConvTranspose. cuDNN accepts the output size when the forward
  // convolution of Y gives back X's size, which covers output_padding and
  // pads_end within a stride of pads_begin; negative pads do not fit.
  for (int i = 0; i < 2; ++i) {
    const int64_t dilated = (conv.kernel[i] - 1) * conv.dilations[i] + 1;
    const int64_t span = y[2 + i] + 2 * conv.pads_begin[i] - dilated;
    if (conv.pads_begin[i] < 0 || span < 0 || span / conv.strides[i] + 1 != x[2 + i]) {
      return NodeUnimplemented(
          spec,
          absl::StrCat("cuDNN pads both sides of a spatial dim alike and not negatively; pads [",
                       conv.pads_begin[0], ",", conv.pads_begin[1], ",", conv.pads_end[0], ",",
                       conv.pads_end[1], "] (begin h, w, end h, w) with output_padding [",
                       conv.output_padding[0], ",", conv.output_padding[1],
                       "] give an output it cannot produce"));
    }
  }
  ConvGeometry geometry;
  geometry.pads = conv.pads_begin;
  geometry.strides = conv.strides;
  geometry.dilations = conv.dilations;
  geometry.group = conv.group;
  const bool has_bias = HasInput(spec, 2);

  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ConvDescriptors> d,
                            MakeDescriptors(context.device, x, w, y, has_bias, geometry));
  REPLICAD_ASSIGN_OR_RETURN(Dims4 cudnn_x, CudnnForwardDims(context.device, *d, d->y.get()));
  if (cudnn_x != x) {
    return absl::InternalError(absl::StrCat(
        NodeLabel(spec), ": cuDNN maps output [", absl::StrJoin(y, ","), "] to input [",
        absl::StrJoin(cudnn_x, ","), "], the node has [", absl::StrJoin(x, ","), "]"));
  }
  REPLICAD_ASSIGN_OR_RETURN(
      AlgorithmChoice choice,
      ChooseBackwardData(spec, context, *d, CacheKey("backward_data", context, x, w, y, geometry)));
  return std::make_unique<CudnnConvKernel>(context, std::move(d), /*transposed=*/true, choice,
                                           has_bias, /*fused_sum=*/false, CudaUnary{},
                                           NumElements(spec.outputs[0].shape));
}

}  // namespace replicad
