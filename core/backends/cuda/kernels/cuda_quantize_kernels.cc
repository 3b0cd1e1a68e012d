// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on a CUDA slot
// (quantize_launch.h): the CPU kernels' bytes. Scales and zero points stay
// in device memory, where the graph may have computed them (a
// DynamicQuantizeLinear feeding a MatMulInteger), and the launches read them
// there, so Run only enqueues.

#include <cstdint>
#include <memory>

#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/quantize_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantize_attributes.h"
#include "core/tensor/shape.h"

namespace replicad {
namespace {

// The parsers accept uint8, int8 and int32 (DequantizeLinear's x) only.
QuantizedType QuantizedTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return QuantizedType::kInt8;
    case DType::kInt32:
      return QuantizedType::kInt32;
    default:
      return QuantizedType::kUint8;
  }
}

// Three launches sharing the plan's workspace for the partial ranges. The
// node names y, y_scale and y_zero_point (ONNX's checker refuses fewer when
// the model loads), so the plan hands Run all three.
class DynamicQuantizeOnDevice final : public Kernel {
 public:
  DynamicQuantizeOnDevice(const CudaKernelContext& context, int64_t count)
      : context_(context), count_(count) {}

  size_t workspace_bytes() const override { return DynamicQuantizeLinearWorkspaceBytes(); }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchDynamicQuantizeLinear(static_cast<const float*>(inputs[0]), count_, workspace_,
                                static_cast<uint8_t*>(outputs[0]), static_cast<float*>(outputs[1]),
                                static_cast<uint8_t*>(outputs[2]), context_.stream);
    return LastLaunchStatus(context_.device, "DynamicQuantizeLinearKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t count_;
  void* workspace_ = nullptr;
};

}  // namespace

KernelOrStatus MakeCudaQuantizeKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const int64_t n = NumElements(spec.inputs[0]->shape);
  if (spec.op_type == "DynamicQuantizeLinear") {
    return std::make_unique<DynamicQuantizeOnDevice>(context, n);
  }
  const bool quantize = spec.op_type == "QuantizeLinear";
  REPLICAD_ASSIGN_OR_RETURN(LinearQuantization q,
                            quantize ? ParseQuantizeLinear(spec) : ParseDequantizeLinear(spec));
  const QuantizedType type = QuantizedTypeOf(q.quantized);
  const bool has_zero_point = q.has_zero_point;
  const int64_t channels = q.layout.channels, inner = q.layout.inner;
  // Input 1 the scales, input 2 the optional zero points.
  auto parameters_of = [has_zero_point, channels, inner](const void* const* in) {
    QuantizationParameters p;
    p.scales = static_cast<const float*>(in[1]);
    p.zero_points = has_zero_point ? in[2] : nullptr;
    p.channels = channels;
    p.inner = inner;
    return p;
  };
  if (quantize) {
    return std::make_unique<LaunchKernel>(
        context, "QuantizeLinearKernel",
        [type, n, parameters_of](const void* const* in, void* const* out, cudaStream_t stream) {
          LaunchQuantizeLinear(static_cast<const float*>(in[0]), out[0], type, n, parameters_of(in),
                               stream);
        });
  }
  return std::make_unique<LaunchKernel>(
      context, "DequantizeLinearKernel",
      [type, n, parameters_of](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchDequantizeLinear(in[0], type, static_cast<float*>(out[0]), n, parameters_of(in),
                               stream);
      });
}

}  // namespace replicad
