// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv on a CUDA slot
// (integer_product_launch.h): on int8 tensor cores where the weights are
// known when planned (cuda_integer_tensor_core_kernel.cc), else as exact
// int32 sums in an integer matrix product of our own, since cuBLAS's int8
// products take no zero points a run computes; either way the bytes are the
// CPU's exact kernel's (integer_product_kernels.cc). Zero points,
// scales and the bias are read on the device where the graph left them, so
// Run only enqueues.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backends/cuda/kernels/integer_product_form.h"
#include "core/backends/cuda/kernels/integer_product_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantize_attributes.h"
#include "core/tensor/shape.h"

namespace replicad {
namespace {

// A's and B's matrix for each output matrix, batch dims broadcast, in the
// CPU kernel's order: [2 * batches] values, uploaded once.
std::vector<int64_t> MatMulOperandTable(const MatMulLayout& layout) {
  const Shape& out = layout.padded_output;
  const size_t batch_rank = out.size() - 2;
  const int64_t batches = NumElements(Shape(out.begin(), out.begin() + batch_rank));
  std::vector<int64_t> table;
  table.reserve(2 * batches);
  for (int64_t index = 0; index < batches; ++index) {
    int64_t rest = index, a_index = 0, b_index = 0, a_stride = 1, b_stride = 1;
    for (size_t d = batch_rank; d-- > 0;) {
      const int64_t position = rest % out[d];
      rest /= out[d];
      if (layout.a[d] != 1) a_index += position * a_stride;
      if (layout.b[d] != 1) b_index += position * b_stride;
      a_stride *= layout.a[d];
      b_stride *= layout.b[d];
    }
    table.push_back(a_index);
    table.push_back(b_index);
  }
  return table;
}

KernelOrStatus BuildIntegerMatMul(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerMatMul matmul, ParseIntegerMatMul(spec));
  const MatMulLayout& layout = matmul.layout;
  const std::vector<int64_t> table = MatMulOperandTable(layout);
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> operands,
                            UploadToDevice(context, table.data(), table.size() * sizeof(int64_t)));
  IntegerMatMulShape shape;
  shape.m = layout.a[layout.a.size() - 2];
  shape.k = layout.a.back();
  shape.n = layout.b.back();
  shape.batches = static_cast<int64_t>(table.size() / 2);
  shape.operands = static_cast<const int64_t*>(operands->data());
  const IntegerProductInputs at = matmul.product.inputs;
  const DeviceProduct form = IntegerProductForm(spec, matmul.product, shape.n);
  // The lambda holds `operands`, which the shape points into.
  return std::make_unique<LaunchKernel>(
      context, "IntegerMatMulKernel",
      [shape, form, at, operands](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchIntegerMatMul(in[at.a], in[at.b], out[0], shape, WithProductParameters(form, at, in),
                            stream);
      });
}

KernelOrStatus BuildIntegerConv(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerConv conv, ParseIntegerConv(spec));
  const IntegerConvShape shape = IntegerConvShapeOf(spec, conv);
  const IntegerProductInputs at = conv.product.inputs;
  const DeviceProduct form = IntegerProductForm(spec, conv.product, shape.out_channels);
  return std::make_unique<LaunchKernel>(
      context, "IntegerConvKernel",
      [shape, form, at](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchIntegerConv(in[at.a], in[at.b], out[0], shape, WithProductParameters(form, at, in),
                          stream);
      });
}

}  // namespace

DeviceProduct IntegerProductForm(const KernelSpec& spec, const IntegerProduct& product,
                                 int64_t channels) {
  const IntegerProductInputs& at = product.inputs;
  DeviceProduct p;
  p.a_signed = product.a == DType::kInt8;
  p.b_signed = product.b == DType::kInt8;
  if (product.requantized) {
    p.output = product.output == DType::kInt8 ? ProductOutput::kInt8 : ProductOutput::kUint8;
    p.b_scale_per_channel = channels > 1 && NumElements(spec.inputs[at.b_scale]->shape) == channels;
  }
  p.b_zero_point_per_channel = at.b_zero_point >= 0 && channels > 1 &&
                               NumElements(spec.inputs[at.b_zero_point]->shape) == channels;
  return p;
}

DeviceProduct WithProductParameters(DeviceProduct p, const IntegerProductInputs& at,
                                    const void* const* in) {
  auto input = [in](int index) { return index >= 0 ? in[index] : nullptr; };
  p.a_zero_point = input(at.a_zero_point);
  p.b_zero_point = input(at.b_zero_point);
  p.a_scale = static_cast<const float*>(input(at.a_scale));
  p.b_scale = static_cast<const float*>(input(at.b_scale));
  p.y_scale = static_cast<const float*>(input(at.y_scale));
  p.y_zero_point = input(at.y_zero_point);
  p.bias = static_cast<const int32_t*>(input(at.bias));
  return p;
}

IntegerConvShape IntegerConvShapeOf(const KernelSpec& spec, const IntegerConv& conv) {
  const Shape& x = spec.inputs[conv.product.inputs.a]->shape;
  const Window2d& window = conv.conv.window;
  IntegerConvShape shape;
  shape.images = x[0];
  shape.channels = x[1];
  shape.height = x[2];
  shape.width = x[3];
  shape.out_channels = conv.conv.out_channels;
  shape.group = conv.conv.group;
  shape.kernel_h = window.kernel[0];
  shape.kernel_w = window.kernel[1];
  shape.stride_h = window.strides[0];
  shape.stride_w = window.strides[1];
  shape.dilation_h = window.dilations[0];
  shape.dilation_w = window.dilations[1];
  shape.pad_top = window.pads_begin[0];
  shape.pad_left = window.pads_begin[1];
  shape.out_h = window.output[0];
  shape.out_w = window.output[1];
  return shape;
}

KernelOrStatus MakeCudaIntegerProductKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> tensor_cores,
                            MakeCudaIntegerTensorCoreKernel(spec, context));
  if (tensor_cores != nullptr) return tensor_cores;
  if (spec.op_type == "ConvInteger" || spec.op_type == "QLinearConv") {
    return BuildIntegerConv(spec, context);
  }
  return BuildIntegerMatMul(spec, context);
}

}  // namespace replicad
