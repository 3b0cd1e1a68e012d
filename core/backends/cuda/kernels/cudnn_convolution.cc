#include "core/backends/cuda/kernels/cudnn_convolution.h"

#include <climits>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Choices by convolution for the whole process: plans are made per batch
// size and per slot, and the same layer shape should not query cuDNN again.
class AlgorithmCache {
 public:
  static AlgorithmCache& Get() {
    static AlgorithmCache* const cache = new AlgorithmCache;
    return *cache;
  }

  std::optional<ConvAlgorithm> Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }

  // Keeps the first choice stored under `key` (two slots may choose at once;
  // the heuristics answer both alike) and returns it.
  ConvAlgorithm Insert(const std::string& key, const ConvAlgorithm& choice) {
    absl::MutexLock lock(&mu_);
    return choices_.emplace(key, choice).first->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, ConvAlgorithm> choices_ ABSL_GUARDED_BY(mu_);
};

// What differs between the directions: cuDNN's three query functions, named
// for messages. `Heuristics` lists candidates best first; `Workspace` asks
// one candidate's exact need under the descriptor's math type.
struct ForwardCalls {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr const char* kName = "forward";
  static constexpr const char* kMaxCountCall = "cudnnGetConvolutionForwardAlgorithmMaxCount";
  static constexpr const char* kHeuristicsCall = "cudnnGetConvolutionForwardAlgorithm_v7";
  static constexpr const char* kWorkspaceCall = "cudnnGetConvolutionForwardWorkspaceSize";
  static cudnnStatus_t MaxCount(cudnnHandle_t h, int* count) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, count);
  }
  static cudnnStatus_t Heuristics(cudnnHandle_t h, const ConvDescriptors& d, int requested,
                                  int* returned, Perf* results) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                  requested, returned, results);
  }
  static cudnnStatus_t Workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                   algo, bytes);
  }
};

struct BackwardDataCalls {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr const char* kName = "backward_data";
  static constexpr const char* kMaxCountCall = "cudnnGetConvolutionBackwardDataAlgorithmMaxCount";
  static constexpr const char* kHeuristicsCall = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
  static constexpr const char* kWorkspaceCall = "cudnnGetConvolutionBackwardDataWorkspaceSize";
  static cudnnStatus_t MaxCount(cudnnHandle_t h, int* count) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, count);
  }
  static cudnnStatus_t Heuristics(cudnnHandle_t h, const ConvDescriptors& d, int requested,
                                  int* returned, Perf* results) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(),
                                                       d.x.get(), requested, returned, results);
  }
  static cudnnStatus_t Workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(),
                                                        d.x.get(), algo, bytes);
  }
};

struct BackwardFilterCalls {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr const char* kName = "backward_filter";
  static constexpr const char* kMaxCountCall = "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount";
  static constexpr const char* kHeuristicsCall = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
  static constexpr const char* kWorkspaceCall = "cudnnGetConvolutionBackwardFilterWorkspaceSize";
  static cudnnStatus_t MaxCount(cudnnHandle_t h, int* count) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, count);
  }
  static cudnnStatus_t Heuristics(cudnnHandle_t h, const ConvDescriptors& d, int requested,
                                  int* returned, Perf* results) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(),
                                                         d.w.get(), requested, returned, results);
  }
  static cudnnStatus_t Workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo algo,
                                 size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(),
                                                          d.w.get(), algo, bytes);
  }
};

std::string CacheKey(absl::string_view direction, const CudaKernelContext& context,
                     const ConvDescriptors& d) {
  const ConvGeometry& g = d.geometry;
  const std::string shapes =
      !d.nd_key.empty()
          ? d.nd_key
          : absl::StrCat("x[", absl::StrJoin(d.x_dims, ","), "] w[", absl::StrJoin(d.w_dims, ","),
                         "] y[", absl::StrJoin(d.y_dims, ","), "] pads[",
                         absl::StrJoin(g.pads, ","), "] strides[", absl::StrJoin(g.strides, ","),
                         "] dilations[", absl::StrJoin(g.dilations, ","), "] group ", g.group);
  return absl::StrCat(direction, " ", context.device, " ", shapes, " math ",
                      ComputePrecisionName(d.math), " io ", static_cast<int>(d.io_type),
                      " deterministic ", context.deterministic_convolutions, " max_workspace ",
                      context.max_workspace_bytes);
}

// The first of `results` (best first) that runs within `max_workspace_bytes`
// and, when `deterministic_only`, is deterministic. A candidate whose exact
// workspace query fails is passed over.
template <typename Calls>
std::optional<ConvAlgorithm> FirstFitting(const CudaKernelContext& context,
                                          const ConvDescriptors& d,
                                          const std::vector<typename Calls::Perf>& results,
                                          bool deterministic_only) {
  const bool sets_math_type = d.io_type != CUDNN_DATA_FLOAT;
  for (const typename Calls::Perf& perf : results) {
    if (perf.status != CUDNN_STATUS_SUCCESS || perf.memory > context.max_workspace_bytes) continue;
    if (deterministic_only && perf.determinism != CUDNN_DETERMINISTIC) continue;
    // The workspace under the math type the algorithm will run in.
    if (sets_math_type &&
        cudnnSetConvolutionMathType(d.conv.get(), perf.mathType) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    size_t bytes = 0;
    if (Calls::Workspace(context.cudnn, d, perf.algo, &bytes) != CUDNN_STATUS_SUCCESS ||
        bytes > context.max_workspace_bytes) {
      continue;
    }
    return ConvAlgorithm{static_cast<int>(perf.algo), bytes, sets_math_type, perf.mathType};
  }
  return std::nullopt;
}

// Sets the chosen algorithm's math type on the descriptor where it carries one.
absl::StatusOr<ConvAlgorithm> ApplyMathType(const CudaKernelContext& context,
                                            const ConvDescriptors& d, ConvAlgorithm choice) {
  if (choice.sets_math_type) {
    REPLICAD_CUDA_RETURN_IF_ERROR(context.device,
                                  cudnnSetConvolutionMathType(d.conv.get(), choice.math_type));
  }
  return choice;
}

template <typename Calls>
absl::StatusOr<ConvAlgorithm> Choose(const KernelSpec& spec, const CudaKernelContext& context,
                                     const ConvDescriptors& d) {
  const std::string key = CacheKey(Calls::kName, context, d);
  if (std::optional<ConvAlgorithm> cached = AlgorithmCache::Get().Find(key)) {
    return ApplyMathType(context, d, *cached);
  }
  int max_count = 0;
  REPLICAD_RETURN_IF_ERROR(CudaCallStatus(Calls::MaxCount(context.cudnn, &max_count),
                                          context.device, Calls::kMaxCountCall));
  std::vector<typename Calls::Perf> results(max_count);
  int returned = 0;
  REPLICAD_RETURN_IF_ERROR(
      CudaCallStatus(Calls::Heuristics(context.cudnn, d, max_count, &returned, results.data()),
                     context.device, Calls::kHeuristicsCall));
  results.resize(returned);
  // Heuristics order the results fastest first.
  std::optional<ConvAlgorithm> choice = FirstFitting<Calls>(
      context, d, results, /*deterministic_only=*/context.deterministic_convolutions);
  if (!choice.has_value()) {
    choice = FirstFitting<Calls>(context, d, results, /*deterministic_only=*/false);
  }
  if (!choice.has_value()) {
    return NodeUnimplemented(
        spec, absl::StrCat("cuDNN offers no ", Calls::kName,
                           " algorithm for this convolution within the workspace limit of ",
                           context.max_workspace_bytes, " bytes",
                           d.math == ComputePrecision::kFloat32 ? " in FMA math" : ""));
  }
  return ApplyMathType(context, d, AlgorithmCache::Get().Insert(key, *choice));
}

// FMA math excludes tensor cores, which cuDNN's default math may use for
// float32 (TF32); fp16 lets cuDNN convert float32 operands to float16.
cudnnMathType_t ConvMathType(ComputePrecision math) {
  if (math == ComputePrecision::kFloat32) return CUDNN_FMA_MATH;
  if (math == ComputePrecision::kFloat16) return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  return CUDNN_DEFAULT_MATH;
}

}  // namespace

absl::StatusOr<ConvGeometry> SymmetricConvGeometry(const KernelSpec& spec,
                                                   const ConvAttributes& conv,
                                                   std::array<int64_t, 2> input) {
  const Window2d& window = conv.window;
  for (int i = 0; i < 2; ++i) {
    const int64_t dilated = (window.kernel[i] - 1) * window.dilations[i] + 1;
    const int64_t span = input[i] + 2 * window.pads_begin[i] - dilated;
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
  return geometry;
}

absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeConvDescriptors(
    const KernelSpec& spec, const CudaKernelContext& context, const Dims4& x, const Dims4& w,
    const Dims4& y, const ConvGeometry& geometry, cudnnDataType_t io_type) {
  const std::string& device = context.device;
  auto d = std::make_unique<ConvDescriptors>();
  d->x_dims = x;
  d->w_dims = w;
  d->y_dims = y;
  d->geometry = geometry;
  d->math = ProductMathOf(spec, context);
  d->io_type = io_type;
  REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device, d->x, x, io_type));
  REPLICAD_RETURN_IF_ERROR(SetCudnnTensor(device, d->y, y, io_type));
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateFilterDescriptor(d->w.receive()));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetFilter4dDescriptor(d->w.get(), io_type, CUDNN_TENSOR_NCHW,
                                         static_cast<int>(w[0]), static_cast<int>(w[1]),
                                         static_cast<int>(w[2]), static_cast<int>(w[3])));
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateConvolutionDescriptor(d->conv.receive()));
  // ONNX's Conv is a cross-correlation; its dilations count like cuDNN's.
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device,
      cudnnSetConvolution2dDescriptor(
          d->conv.get(), static_cast<int>(geometry.pads[0]), static_cast<int>(geometry.pads[1]),
          static_cast<int>(geometry.strides[0]), static_cast<int>(geometry.strides[1]),
          static_cast<int>(geometry.dilations[0]), static_cast<int>(geometry.dilations[1]),
          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetConvolutionGroupCount(d->conv.get(), static_cast<int>(geometry.group)));
  // 16-bit tensors are what tensor cores read: nothing to allow or convert.
  const cudnnMathType_t math =
      io_type == CUDNN_DATA_FLOAT ? ConvMathType(d->math) : CUDNN_TENSOR_OP_MATH;
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnSetConvolutionMathType(d->conv.get(), math));
  int n = 0, c = 0, h = 0, wd = 0;
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnGetConvolution2dForwardOutputDim(d->conv.get(), d->x.get(), d->w.get(), &n, &c,
                                                    &h, &wd));
  if (Dims4{n, c, h, wd} != y) {
    return absl::InternalError(absl::StrCat(NodeLabel(spec), ": cuDNN's convolution maps [",
                                            absl::StrJoin(x, ","), "] to [", n, ",", c, ",", h, ",",
                                            wd, "], the node needs [", absl::StrJoin(y, ","), "]"));
  }
  return d;
}

absl::StatusOr<ConvAlgorithm> ChooseConvAlgorithm(const KernelSpec& spec,
                                                  const CudaKernelContext& context,
                                                  const ConvDescriptors& d,
                                                  ConvDirection direction) {
  switch (direction) {
    case ConvDirection::kForward:
      return Choose<ForwardCalls>(spec, context, d);
    case ConvDirection::kBackwardData:
      return Choose<BackwardDataCalls>(spec, context, d);
    case ConvDirection::kBackwardFilter:
      return Choose<BackwardFilterCalls>(spec, context, d);
  }
  return absl::InternalError("unknown convolution direction");
}

absl::StatusOr<ConvGeometry3d> SymmetricConv3dGeometry(const KernelSpec& spec,
                                                       const Conv3dAttributes& conv) {
  const Shape& x = spec.inputs[0]->shape;
  const WindowNd& window = conv.window;
  ConvGeometry3d geometry;
  for (int i = 0; i < 3; ++i) {
    const int64_t dilated = (window.kernel[i] - 1) * window.dilations[i] + 1;
    const int64_t span = x[2 + i] + 2 * window.pads_begin[i] - dilated;
    if (span < 0 || span / window.strides[i] + 1 != window.output[i]) {
      return NodeUnimplemented(
          spec, absl::StrCat("cuDNN pads both sides of a spatial dim alike; pads begin [",
                             absl::StrJoin(window.pads_begin, ","), "] end [",
                             absl::StrJoin(window.pads_end, ","), "] give different windows"));
    }
    geometry.pads[i] = window.pads_begin[i];
    geometry.strides[i] = window.strides[i];
    geometry.dilations[i] = window.dilations[i];
  }
  geometry.group = conv.group;
  return geometry;
}

absl::StatusOr<std::unique_ptr<ConvDescriptors>> MakeConv3dDescriptors(
    const KernelSpec& spec, const CudaKernelContext& context, const Shape& x, const Shape& w,
    const Shape& y, const ConvGeometry3d& geometry) {
  for (const Shape* shape : {&x, &w, &y}) {
    if (NumElements(*shape) > INT_MAX) {
      return NodeUnimplemented(
          spec, absl::StrCat("cuDNN convolutions take tensors of at most ", INT_MAX, " elements"));
    }
  }
  int pads[3], strides[3], dilations[3];
  for (int i = 0; i < 3; ++i) {
    pads[i] = static_cast<int>(geometry.pads[i]);
    strides[i] = static_cast<int>(geometry.strides[i]);
    dilations[i] = static_cast<int>(geometry.dilations[i]);
  }
  const std::string& device = context.device;
  auto d = std::make_unique<ConvDescriptors>();
  d->math = ProductMathOf(spec, context);
  d->nd_key = absl::StrCat("x[", absl::StrJoin(x, ","), "] w[", absl::StrJoin(w, ","), "] y[",
                           absl::StrJoin(y, ","), "] pads[", absl::StrJoin(pads, ","), "] strides[",
                           absl::StrJoin(strides, ","), "] dilations[",
                           absl::StrJoin(dilations, ","), "] group ", geometry.group);
  REPLICAD_RETURN_IF_ERROR(SetCudnnTensorNd(device, d->x, x));
  REPLICAD_RETURN_IF_ERROR(SetCudnnTensorNd(device, d->y, y));
  const NdDims filter = ToNdDims(w);
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateFilterDescriptor(d->w.receive()));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetFilterNdDescriptor(d->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                         filter.rank, filter.dims));
  REPLICAD_CUDA_RETURN_IF_ERROR(device, cudnnCreateConvolutionDescriptor(d->conv.receive()));
  // ONNX's Conv is a cross-correlation; its dilations count like cuDNN's.
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetConvolutionNdDescriptor(d->conv.get(), 3, pads, strides, dilations,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnSetConvolutionGroupCount(d->conv.get(), static_cast<int>(geometry.group)));
  REPLICAD_CUDA_RETURN_IF_ERROR(device,
                                cudnnSetConvolutionMathType(d->conv.get(), ConvMathType(d->math)));
  int out[5] = {};
  REPLICAD_CUDA_RETURN_IF_ERROR(
      device, cudnnGetConvolutionNdForwardOutputDim(d->conv.get(), d->x.get(), d->w.get(), 5, out));
  for (int i = 0; i < 5; ++i) {
    if (out[i] != y[i]) {
      return absl::InternalError(absl::StrCat(
          NodeLabel(spec), ": cuDNN's convolution maps [", absl::StrJoin(x, ","), "] to [",
          absl::StrJoin(out, ","), "], the node needs [", absl::StrJoin(y, ","), "]"));
    }
  }
  return d;
}

}  // namespace replicad
