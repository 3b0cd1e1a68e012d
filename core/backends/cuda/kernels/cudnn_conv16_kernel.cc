// A 2-D Conv of a chain served in 16 bits (--precision fp16 or bf16): cuDNN
// reads X and W and writes Y in float16 (bfloat16), NCHW, summing in float32
// on tensor cores, as a PyTorch autocast convolution does; then one float32
// pass adds the bias and the fused residual, applies the fused activation
// and writes the output in 16 bits for the next convolution, or in float32
// after the chain's last. Within a chain no conversion runs between two
// convolutions (with float32 tensors cuDNN converts both sides on every run,
// passes as long as the convolution's own reads), and bf16 runs on bf16
// tensor cores (cuDNN has no conversion of float32 to bfloat16: a float32
// bf16 convolution runs in TF32).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cudnn_convolution.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_util.h"
#include "core/tensor/half_float.h"

namespace replicad {
namespace {

// Workspace parts start on 256-byte boundaries, as cuDNN's own buffers do.
size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The layout name of 16-bit values in `precision` (kFloat16 or kBFloat16).
const char* SixteenBitLayout(ComputePrecision precision) {
  return precision == ComputePrecision::kBFloat16 ? kCudaBFloat16Layout : kCudaFloat16Layout;
}

// How the kernel gets each operand in 16 bits and where its output goes.
struct Conv16Form {
  bool bfloat16 = false;
  bool x_16bit = false;       // X arrives in 16 bits; else converted per run.
  bool addend_16bit = false;  // The fused residual arrives in 16 bits.
  bool out_16bit = false;     // The output stays 16-bit for the next convolution.
  int64_t x_elements = 0;
  int64_t w_elements = 0;
  int64_t y_elements = 0;
  int64_t channels = 0;
  int64_t spatial = 0;
  bool has_bias = false;
  bool fused_sum = false;
  CudaUnary activation;
};

class CudnnConv16Kernel : public Kernel {
 public:
  CudnnConv16Kernel(const CudaKernelContext& context, std::unique_ptr<ConvDescriptors> descriptors,
                    ConvAlgorithm choice, const Conv16Form& form,
                    std::shared_ptr<Buffer> constant_weights)
      : device_(context.device),
        cudnn_(context.cudnn),
        stream_(context.stream),
        d_(std::move(descriptors)),
        choice_(choice),
        form_(form),
        constant_weights_(std::move(constant_weights)) {
    // The workspace: cuDNN's (within the slot's limit), then X, W and Y in
    // 16 bits where they need a place (activation-sized, as a plan's buffers).
    size_t offset = Aligned(choice_.workspace_bytes);
    x_offset_ = offset;
    if (!form_.x_16bit) offset += Aligned(form_.x_elements * sizeof(uint16_t));
    w_offset_ = offset;
    if (constant_weights_ == nullptr) offset += Aligned(form_.w_elements * sizeof(uint16_t));
    y_offset_ = offset;
    if (!form_.out_16bit) offset += Aligned(form_.y_elements * sizeof(uint16_t));
    workspace_bytes_ = offset;
  }

  size_t workspace_bytes() const override { return workspace_bytes_; }
  void SetWorkspace(void* workspace) override { workspace_ = static_cast<char*>(workspace); }

  std::string native_output_layout() const override {
    return form_.out_16bit ? SixteenBitLayout(form_.bfloat16 ? ComputePrecision::kBFloat16
                                                             : ComputePrecision::kFloat16)
                           : std::string();
  }
  size_t native_output_bytes() const override {
    return form_.out_16bit ? static_cast<size_t>(form_.y_elements) * sizeof(uint16_t) : 0;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const void* x = inputs[0];
    if (!form_.x_16bit) {
      uint16_t* converted = reinterpret_cast<uint16_t*>(workspace_ + x_offset_);
      LaunchFloatToHalf(static_cast<const float*>(inputs[0]), converted, form_.x_elements,
                        form_.bfloat16, stream_);
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(device_, "LaunchFloatToHalf(X)"));
      x = converted;
    }
    const void* w = constant_weights_ != nullptr ? constant_weights_->data() : nullptr;
    if (w == nullptr) {
      uint16_t* converted = reinterpret_cast<uint16_t*>(workspace_ + w_offset_);
      LaunchFloatToHalf(static_cast<const float*>(inputs[1]), converted, form_.w_elements,
                        form_.bfloat16, stream_);
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(device_, "LaunchFloatToHalf(W)"));
      w = converted;
    }
    uint16_t* y = form_.out_16bit ? static_cast<uint16_t*>(outputs[0])
                                  : reinterpret_cast<uint16_t*>(workspace_ + y_offset_);
    // Float32 scaling factors: the sums are float32 (cuDNN's pseudo-16-bit configurations).
    const float one = 1.0f;
    const float zero = 0.0f;
    REPLICAD_CUDA_RETURN_IF_ERROR(
        device_,
        cudnnConvolutionForward(cudnn_, &one, d_->x.get(), x, d_->w.get(), w, d_->conv.get(),
                                static_cast<cudnnConvolutionFwdAlgo_t>(choice_.algorithm),
                                workspace_, choice_.workspace_bytes, &zero, d_->y.get(), y));
    ConvEpilogue16 epilogue;
    epilogue.y = y;
    epilogue.bias = form_.has_bias ? static_cast<const float*>(inputs[2]) : nullptr;
    epilogue.addend = form_.fused_sum ? inputs[3] : nullptr;
    epilogue.addend_16bit = form_.addend_16bit;
    epilogue.out = outputs[0];
    epilogue.out_16bit = form_.out_16bit;
    epilogue.bfloat16 = form_.bfloat16;
    epilogue.n = form_.y_elements;
    epilogue.channels = form_.channels;
    epilogue.spatial = form_.spatial;
    epilogue.f = form_.activation;
    LaunchConvEpilogue16(epilogue, stream_);
    return LastLaunchStatus(device_, "LaunchConvEpilogue16");
  }

 private:
  std::string device_;
  cudnnHandle_t cudnn_;
  cudaStream_t stream_;
  std::unique_ptr<ConvDescriptors> d_;
  ConvAlgorithm choice_;
  Conv16Form form_;
  std::shared_ptr<Buffer> constant_weights_;  // W in 16 bits, when W is an initializer.
  size_t x_offset_ = 0;
  size_t w_offset_ = 0;
  size_t y_offset_ = 0;
  size_t workspace_bytes_ = 0;
  char* workspace_ = nullptr;
};

// Whether input `index` arrives in 16 bits of `precision`; Internal naming
// the node for a layout this kernel does not read.
absl::StatusOr<bool> ArrivesSixteenBit(const KernelSpec& spec, int index,
                                       ComputePrecision precision) {
  if (index >= static_cast<int>(spec.input_layouts.size()) || spec.input_layouts[index].empty()) {
    return false;
  }
  if (spec.input_layouts[index] == SixteenBitLayout(precision)) return true;
  return absl::InternalError(
      absl::StrCat(NodeLabel(spec), ": input ", index, " arrives in layout '",
                   spec.input_layouts[index], "'; a ", ComputePrecisionName(precision),
                   " convolution reads float32 or '", SixteenBitLayout(precision), "'"));
}

}  // namespace

bool ArrivesInSixteenBits(const KernelSpec& spec) {
  for (const std::string& layout : spec.input_layouts) {
    if (!layout.empty()) return true;
  }
  return false;
}

bool TakesSixteenBitConv(const KernelSpec& spec, const CudaKernelContext& context) {
  if (ArrivesInSixteenBits(spec)) return true;
  // Only a chain's convolutions: one that reads and writes float32 keeps the
  // float32 path, whose output is its float32 sums (a training step's
  // products must agree with a CPU slot's, which round them once, if at all).
  const ComputePrecision math = ProductMathOf(spec, context);
  if (math != ComputePrecision::kFloat16 && math != ComputePrecision::kBFloat16) return false;
  absl::StatusOr<std::string> output = spec.attributes->GetString(kOutputPrecisionAttribute, "");
  return spec.inputs[0]->shape.size() == 4 && spec.native_output && output.ok() &&
         *output == ComputePrecisionName(math);
}

KernelOrStatus MakeCudaConv16Kernel(const KernelSpec& spec, CudaKernelContext& context) {
  const ComputePrecision math = ProductMathOf(spec, context);
  if ((math != ComputePrecision::kFloat16 && math != ComputePrecision::kBFloat16) ||
      spec.inputs[0]->shape.size() != 4) {
    return absl::InternalError(absl::StrCat(
        NodeLabel(spec), ": an input arrives in 16 bits, but the node is a ",
        spec.inputs[0]->shape.size() - 2, "-D convolution computing in ",
        ComputePrecisionName(math), "; only 2-D fp16 and bf16 convolutions read 16-bit inputs"));
  }
  REPLICAD_ASSIGN_OR_RETURN(ConvAttributes conv, ParseConvAttributes(spec));
  const Dims4 x = ToDims4(spec.inputs[0]->shape);
  const Dims4 w = ToDims4(spec.inputs[1]->shape);
  const Dims4 y = ToDims4(spec.outputs[0].shape);
  REPLICAD_RETURN_IF_ERROR(CheckFitsCudnn(spec, "cuDNN convolutions take", {x, w, y}));
  REPLICAD_ASSIGN_OR_RETURN(ConvGeometry geometry, SymmetricConvGeometry(spec, conv, {x[2], x[3]}));
  Conv16Form form;
  form.bfloat16 = math == ComputePrecision::kBFloat16;
  REPLICAD_ASSIGN_OR_RETURN(form.x_16bit, ArrivesSixteenBit(spec, 0, math));
  REPLICAD_ASSIGN_OR_RETURN(form.addend_16bit, ArrivesSixteenBit(spec, 3, math));
  absl::StatusOr<std::string> output = spec.attributes->GetString(kOutputPrecisionAttribute, "");
  form.out_16bit = spec.native_output && output.ok() && *output == ComputePrecisionName(math);
  form.x_elements = Elements(x);
  form.w_elements = Elements(w);
  form.y_elements = Elements(y);
  form.channels = y[1];
  form.spatial = y[2] * y[3];
  form.has_bias = HasInput(spec, 2);
  form.fused_sum = HasFusedSum(*spec.attributes);
  REPLICAD_ASSIGN_OR_RETURN(std::optional<FusedActivation> fused,
                            ReadFusedActivation(*spec.attributes));
  REPLICAD_ASSIGN_OR_RETURN(form.activation, FusedUnary(fused));

  const cudnnDataType_t io_type = form.bfloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ConvDescriptors> d,
                            MakeConvDescriptors(spec, context, x, w, y, geometry, io_type));
  REPLICAD_ASSIGN_OR_RETURN(ConvAlgorithm choice,
                            ChooseConvAlgorithm(spec, context, *d, ConvDirection::kForward));
  // Weights known now are rounded once (to nearest even, as the device's
  // conversion rounds them); others per run.
  std::shared_ptr<Buffer> constant_weights;
  if (const Tensor* weights = spec.constant_inputs.size() > 1 ? spec.constant_inputs[1] : nullptr) {
    const DType type = form.bfloat16 ? DType::kBFloat16 : DType::kFloat16;
    std::vector<uint16_t> bits(static_cast<size_t>(form.w_elements));
    const float* values = weights->data<float>();
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = FloatToHalfFloatBits(type, values[i]);
    REPLICAD_ASSIGN_OR_RETURN(constant_weights,
                              UploadToDevice(context, bits.data(), bits.size() * sizeof(uint16_t)));
  }
  return std::make_unique<CudnnConv16Kernel>(context, std::move(d), choice, form,
                                             std::move(constant_weights));
}

}  // namespace replicad
