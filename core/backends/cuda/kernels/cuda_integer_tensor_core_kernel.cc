// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv whose weights
// (with their zero points, and the bias) are known when the plan is made, on
// int8 tensor cores through cuBLAS's int8 product (integer_gemm_launch.h):
// chunk by chunk of rows, the activations are packed (shifted to int8; a
// convolution's as im2col rows), cuBLAS sums them against the weights
// packed once, and one pass corrects the sums for the zero points and the
// bias and stores them as the exact kernel does. The bytes are the exact
// kernel's (cuda_integer_product_kernels.cc), hence the CPU's.

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cublas_runner.h"
#include "core/backends/cuda/kernels/integer_gemm_launch.h"
#include "core/backends/cuda/kernels/integer_gemm_weights.h"
#include "core/backends/cuda/kernels/integer_product_form.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantize_attributes.h"

namespace replicad {
namespace {

// The scratch of one chunk (packed rows, raw sums, row sums) stays near
// this: a batch of 256 images of resnet50's early layers would otherwise
// need gigabytes of im2col rows. A chunk holds whole images, so one larger
// image may take more, up to kMaxChunkBytes; past that (a convolution over
// thousands of pixels a side) the exact kernel, which needs no scratch,
// runs instead.
constexpr int64_t kChunkBytes = int64_t{64} << 20;
constexpr int64_t kMaxChunkBytes = int64_t{256} << 20;
constexpr size_t kScratchAlignment = 256;

size_t Aligned(size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// A product on tensor cores: its rows come in units (a convolution's
// images, `rows_per_unit` positions each; MatMul's rows, one each), packed
// and summed `units_per_chunk` at a time.
struct TensorCoreForm {
  bool conv = false;
  IntegerConvShape conv_shape;
  int64_t units = 0;
  int64_t rows_per_unit = 1;
  int64_t units_per_chunk = 0;
  int64_t padded_chunk_rows = 0;  // The most rows a chunk packs.
  bool a_signed = false;
  int64_t channels = 0, depth = 0, padded_channels = 0, padded_depth = 0;
  bool row_sums = false;  // The weights' zero points are not all 0.
  DeviceProduct product;  // Types and flags; the corrections carry zero points and bias.
  IntegerProductInputs at;
};

// Scratch bytes per packed row: its padded_depth int8 values, its
// padded_channels int32 raw sums, its row sum.
int64_t RowBytes(const TensorCoreForm& form) {
  return form.padded_depth + (form.padded_channels + 1) * static_cast<int64_t>(sizeof(int32_t));
}

// cuBLAS's int8 product of `rows` packed rows against the packed weights:
// column-major raw [padded_channels, rows] = W'^T A', the transposed-A,
// plain-B form int8 tensor cores take, both operands K-contiguous, so that
// raw holds each row's channels contiguously. The handle is prepared.
cublasStatus_t RawIntegerProduct(const CublasRunner& cublas, const TensorCoreForm& form,
                                 const void* weights, const void* packed, int64_t rows,
                                 int32_t* raw) {
  const int32_t one = 1, zero = 0;
  return cublas.library().GemmEx_64(
      cublas.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, form.padded_channels, rows, form.padded_depth,
      &one, weights, CUDA_R_8I, form.padded_depth, packed, CUDA_R_8I, form.padded_depth, &zero, raw,
      CUDA_R_32I, form.padded_channels, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
}

class IntegerTensorCoreKernel : public Kernel {
 public:
  IntegerTensorCoreKernel(const CudaKernelContext& context, const TensorCoreForm& form,
                          std::shared_ptr<Buffer> weights, std::shared_ptr<Buffer> corrections)
      : cublas_(context, ComputePrecision::kFloat32, CudaUnary{}),
        form_(form),
        weights_(std::move(weights)),
        corrections_(std::move(corrections)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    REPLICAD_RETURN_IF_ERROR(cublas_.PrepareHandle());
    const TensorCoreForm& f = form_;
    DeviceProduct p = WithProductParameters(f.product, f.at, inputs);
    const void* a_zero_point = p.a_zero_point;
    p.bias = nullptr;  // In the corrections (WriteSum reads no zero point).
    const void* a = inputs[f.at.a];
    char* scratch = static_cast<char*>(workspace_);
    int8_t* packed_values = reinterpret_cast<int8_t*>(scratch);
    int32_t* raw = reinterpret_cast<int32_t*>(scratch + packed_bytes());
    int32_t* row_sums = reinterpret_cast<int32_t*>(scratch + packed_bytes() + raw_bytes());
    const int32_t* corrections = static_cast<const int32_t*>(corrections_->data());
    for (int64_t first = 0; first < f.units; first += f.units_per_chunk) {
      const int64_t units = std::min(f.units_per_chunk, f.units - first);
      PackedRows packed;
      packed.values = packed_values;
      packed.row_sums = f.row_sums ? row_sums : nullptr;
      packed.rows = units * f.rows_per_unit;
      packed.padded_rows = PaddedToIntegerGemm(packed.rows);
      packed.depth = f.depth;
      packed.padded_depth = f.padded_depth;
      if (f.conv) {
        LaunchPackIntegerPatches(a, f.a_signed, a_zero_point, f.conv_shape, first, packed,
                                 cublas_.stream());
      } else {
        LaunchPackIntegerRows(a, f.a_signed, first, packed, cublas_.stream());
      }
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(cublas_.device(), "PackKernel"));
      REPLICAD_CUDA_RETURN_IF_ERROR(
          cublas_.device(),
          RawIntegerProduct(cublas_, f, weights_->data(), packed.values, packed.padded_rows, raw));
      RawIntegerSums sums;
      sums.raw = raw;
      sums.ldc = f.padded_channels;
      sums.biases = corrections;
      sums.weight_sums = corrections + f.channels;
      sums.weight_zero_points = corrections + 2 * f.channels;
      sums.row_sums = packed.row_sums;
      sums.activation_zero_point = a_zero_point;
      sums.activation_signed = f.a_signed;
      sums.depth = f.depth;
      if (f.conv) {
        LaunchIntegerImagesOut(sums, units, f.channels, f.rows_per_unit, first, outputs[0], p,
                               cublas_.stream());
      } else {
        LaunchIntegerRowsOut(sums, units, f.channels, first, outputs[0], p, cublas_.stream());
      }
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(cublas_.device(), "IntegerSumsOut"));
    }
    return absl::OkStatus();
  }

  size_t workspace_bytes() const override {
    return packed_bytes() + raw_bytes() + Aligned(form_.padded_chunk_rows * sizeof(int32_t));
  }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

 private:
  size_t packed_bytes() const { return Aligned(form_.padded_chunk_rows * form_.padded_depth); }
  size_t raw_bytes() const {
    return Aligned(form_.padded_chunk_rows * form_.padded_channels * sizeof(int32_t));
  }

  CublasRunner cublas_;
  TensorCoreForm form_;
  std::shared_ptr<Buffer> weights_;  // [padded_channels, padded_depth] int8.
  // biases, weight sums and weight zero points, [channels] each.
  std::shared_ptr<Buffer> corrections_;
  void* workspace_ = nullptr;
};

// Whether input `index` is left out or known when planned: *value is its
// host tensor, or nullptr when left out.
bool AbsentOrKnown(const KernelSpec& spec, int index, const Tensor** value) {
  *value = nullptr;
  if (!HasInput(spec, index)) return true;
  if (index >= static_cast<int>(spec.constant_inputs.size())) return false;
  *value = spec.constant_inputs[index];
  return *value != nullptr;
}

// The weights' packing source, where the weights, their zero points and the
// bias are known; nullopt otherwise.
std::optional<IntegerGemmWeightsSource> KnownWeights(const KernelSpec& spec,
                                                     const IntegerProduct& product,
                                                     bool channels_are_rows) {
  const IntegerProductInputs& at = product.inputs;
  IntegerGemmWeightsSource source;
  if (!AbsentOrKnown(spec, at.b, &source.weights) || source.weights == nullptr ||
      !AbsentOrKnown(spec, at.b_zero_point, &source.zero_point) ||
      !AbsentOrKnown(spec, at.bias, &source.bias)) {
    return std::nullopt;
  }
  source.channels_are_rows = channels_are_rows;
  return source;
}

// MatMul's B without batch dims, so that A's rows (its batch dims
// flattened) all meet one matrix.
std::optional<TensorCoreForm> MatMulForm(const KernelSpec& spec, const IntegerMatMul& matmul) {
  const MatMulLayout& layout = matmul.layout;
  const int64_t k = layout.a.back();
  const int64_t n = layout.b.back();
  if (NumElements(layout.b) != k * n) return std::nullopt;
  TensorCoreForm form;
  form.units = k == 0 ? 0 : NumElements(spec.inputs[matmul.product.inputs.a]->shape) / k;
  form.rows_per_unit = 1;
  return form;
}

std::optional<TensorCoreForm> ConvForm(const KernelSpec& spec, const IntegerConv& conv) {
  if (conv.conv.group != 1) return std::nullopt;  // Depthwise: K of a few taps.
  TensorCoreForm form;
  form.conv = true;
  form.conv_shape = IntegerConvShapeOf(spec, conv);
  const IntegerConvShape& shape = form.conv_shape;
  // The packing's 32-bit index arithmetic within an image, and the output
  // pass's grid (integer_gemm_launch.h).
  if (shape.channels * shape.height * shape.width > INT_MAX ||
      shape.channels * shape.kernel_h * shape.kernel_w > INT_MAX ||
      shape.out_channels > int64_t{65535} * 32) {
    return std::nullopt;
  }
  form.units = shape.images;
  form.rows_per_unit = shape.out_h * shape.out_w;
  return form;
}

// Sizes the chunks and fills the rest of `form` from the packed weights.
void Complete(TensorCoreForm* form, const IntegerGemmWeights& weights, const KernelSpec& spec,
              const IntegerProduct& product) {
  form->channels = weights.channels;
  form->depth = weights.depth;
  form->padded_channels = weights.padded_channels;
  form->padded_depth = weights.padded_depth;
  form->row_sums = weights.rows_need_sums;
  form->a_signed = product.a == DType::kInt8;
  form->product = IntegerProductForm(spec, product, weights.channels);
  form->at = product.inputs;
  const int64_t chunk_rows =
      std::max<int64_t>(kIntegerGemmAlignment, kChunkBytes / RowBytes(*form));
  form->units_per_chunk =
      std::min(form->units, std::max<int64_t>(1, chunk_rows / form->rows_per_unit));
  form->padded_chunk_rows = PaddedToIntegerGemm(form->units_per_chunk * form->rows_per_unit);
}

// Whether this slot's cuBLAS takes the form: an int8 product of the
// chunk's dims but 16 rows, on zeros, waited for. Some GPUs and cuBLAS
// builds have no int8 tensor-core product (NOT_SUPPORTED). Fails only where
// the stream or the allocator does.
absl::StatusOr<bool> CublasTakes(CudaKernelContext& context, const TensorCoreForm& form,
                                 const Buffer& weights) {
  const int64_t rows = kIntegerGemmAlignment;
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> packed,
                            context.allocate(static_cast<size_t>(rows * form.padded_depth)));
  REPLICAD_ASSIGN_OR_RETURN(
      std::shared_ptr<Buffer> raw,
      context.allocate(static_cast<size_t>(rows * form.padded_channels) * sizeof(int32_t)));
  REPLICAD_CUDA_RETURN_IF_ERROR(
      context.device, cudaMemsetAsync(packed->data(), 0, packed->bytes(), context.stream));
  CublasRunner cublas(context, ComputePrecision::kFloat32, CudaUnary{});
  REPLICAD_RETURN_IF_ERROR(cublas.PrepareHandle());
  const cublasStatus_t status = RawIntegerProduct(cublas, form, weights.data(), packed->data(),
                                                  rows, static_cast<int32_t*>(raw->data()));
  // The scratch is released after the product ran, not while it is queued.
  REPLICAD_CUDA_RETURN_IF_ERROR(context.device, cudaStreamSynchronize(context.stream));
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  // Whatever cuBLAS says (NOT_SUPPORTED, ARCH_MISMATCH, a build that refuses
  // the form), the exact kernel computes the same bytes.
  static std::atomic<bool> logged{false};  // Kernels are built on every slot's thread.
  if (!logged.exchange(true)) {
    LogInfo(absl::StrCat(context.device, ": cuBLAS's int8 tensor-core product refused a ",
                         form.padded_channels, " x ", form.padded_depth, " form (",
                         cublas.library().GetStatusName(status),
                         "); such int8 products run on the exact CUDA-core kernel"));
  }
  return false;
}

}  // namespace

KernelOrStatus MakeCudaIntegerTensorCoreKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const bool conv = spec.op_type == "ConvInteger" || spec.op_type == "QLinearConv";
  std::optional<TensorCoreForm> form;
  IntegerProduct product;
  if (conv) {
    REPLICAD_ASSIGN_OR_RETURN(IntegerConv parsed, ParseIntegerConv(spec));
    product = parsed.product;
    form = ConvForm(spec, parsed);
  } else {
    REPLICAD_ASSIGN_OR_RETURN(IntegerMatMul parsed, ParseIntegerMatMul(spec));
    product = parsed.product;
    form = MatMulForm(spec, parsed);
  }
  if (!form.has_value() || form->units == 0) return nullptr;
  const std::optional<IntegerGemmWeightsSource> source =
      KnownWeights(spec, product, /*channels_are_rows=*/conv);
  if (!source.has_value()) return nullptr;
  const IntegerGemmWeights weights = PackIntegerGemmWeights(*source);
  if (weights.channels == 0 || weights.depth == 0 || weights.depth > kMaxIntegerGemmDepth) {
    return nullptr;
  }
  Complete(&*form, weights, spec, product);
  if (form->padded_chunk_rows * RowBytes(*form) > kMaxChunkBytes) return nullptr;

  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> packed,
                            UploadToDevice(context, weights.values.data(), weights.values.size()));
  std::vector<int32_t> corrections = weights.biases;
  corrections.insert(corrections.end(), weights.weight_sums.begin(), weights.weight_sums.end());
  corrections.insert(corrections.end(), weights.zero_points.begin(), weights.zero_points.end());
  REPLICAD_ASSIGN_OR_RETURN(
      std::shared_ptr<Buffer> uploaded,
      UploadToDevice(context, corrections.data(), corrections.size() * sizeof(int32_t)));
  REPLICAD_ASSIGN_OR_RETURN(bool takes, CublasTakes(context, *form, *packed));
  if (!takes) return nullptr;
  return std::make_unique<IntegerTensorCoreKernel>(context, *form, std::move(packed),
                                                   std::move(uploaded));
}

}  // namespace replicad
