#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/base/status_macros.h"

namespace replicad {

dnnl::memory::desc RowMajorDesc(const Shape& shape, dnnl::memory::data_type type) {
  const dnnl::memory::dims dims =
      shape.empty() ? dnnl::memory::dims{1} : dnnl::memory::dims(shape.begin(), shape.end());
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * std::max<dnnl::memory::dim>(dims[i + 1], 1);
  }
  return dnnl::memory::desc(dims, type, strides);
}

dnnl::primitive_attr UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory::data_type DnnlDataType(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return dnnl::memory::data_type::s8;
    case DType::kUint8:
      return dnnl::memory::data_type::u8;
    case DType::kInt32:
      return dnnl::memory::data_type::s32;
    default:
      return dnnl::memory::data_type::f32;
  }
}

std::shared_ptr<const dnnl::memory> PreparedWeights(CpuKernelContext& context, const Tensor& host,
                                                    const dnnl::memory::desc& plain,
                                                    const dnnl::memory::desc& blocked) {
  std::shared_ptr<WeightCache> cache = context.weights;
  if (cache == nullptr) cache = std::make_shared<WeightCache>(context.engine);
  return cache->Get(host, plain, blocked);
}

BoundPrimitive::BoundPrimitive(CpuKernelContext& context, const dnnl::primitive_desc_base& pd,
                               dnnl::primitive primitive)
    : context_(context), primitive_(std::move(primitive)) {
  const dnnl::memory::desc scratchpad = pd.scratchpad_desc();
  if (scratchpad.get_size() != 0) {
    scratchpad_claim_ = context_.scratchpad.Reserve(scratchpad.get_size());
    scratchpad_ = dnnl::memory(scratchpad, context_.engine, DNNL_MEMORY_NONE);
    args_.push_back({DNNL_ARG_SCRATCHPAD, scratchpad_.get()});
  }
}

void BoundPrimitive::BindInput(int arg, const dnnl::memory::desc& desc, int input_index,
                               size_t byte_offset) {
  // DNNL_MEMORY_NONE: the handle is set on every Execute.
  dnnl::memory memory(desc, context_.engine, DNNL_MEMORY_NONE);
  bindings_.push_back({memory, input_index, /*is_output=*/false, byte_offset});
  args_.push_back({arg, memory.get()});
}

void BoundPrimitive::BindOutput(int arg, const dnnl::memory::desc& desc, int output_index,
                                size_t byte_offset) {
  dnnl::memory memory(desc, context_.engine, DNNL_MEMORY_NONE);
  bindings_.push_back({memory, output_index, /*is_output=*/true, byte_offset});
  args_.push_back({arg, memory.get()});
}

void BoundPrimitive::BindFixed(int arg, const dnnl::memory& memory) {
  fixed_.push_back(memory);
  args_.push_back({arg, memory.get()});
}

void BoundPrimitive::BindFixed(int arg, std::shared_ptr<const dnnl::memory> memory) {
  args_.push_back({arg, memory->get()});
  shared_.push_back(std::move(memory));
}

void BoundPrimitive::BindFixedPart(int arg, std::shared_ptr<const dnnl::memory> memory,
                                   const dnnl::memory::desc& desc, size_t byte_offset) {
  char* base = static_cast<char*>(memory->get_data_handle());
  BindFixed(arg, dnnl::memory(desc, context_.engine, base + byte_offset));
  shared_.push_back(std::move(memory));
}

absl::Status BoundPrimitive::Execute(const void* const* inputs, void* const* outputs,
                                     const std::string& node) {
  // Later kernels may have grown (moved) the shared scratchpad, and plans
  // freed since may let it shrink.
  if (scratchpad_) context_.scratchpad.Trim();
  if (scratchpad_ &&
      dnnl_memory_set_data_handle(scratchpad_.get(), context_.scratchpad.data()) != dnnl_success) {
    return absl::InternalError(absl::StrCat(node, ": oneDNN could not bind the scratchpad"));
  }
  for (const Binding& binding : bindings_) {
    // oneDNN takes void* for every argument; it never writes a source.
    void* handle =
        binding.is_output ? outputs[binding.index] : const_cast<void*>(inputs[binding.index]);
    if (binding.byte_offset != 0) handle = static_cast<char*>(handle) + binding.byte_offset;
    dnnl_status_t status = dnnl_memory_set_data_handle(binding.memory.get(), handle);
    if (status != dnnl_success) {
      return absl::InternalError(
          absl::StrCat(node, ": oneDNN could not bind a buffer (status ", status, ")"));
    }
  }
  dnnl_status_t status = dnnl_primitive_execute(primitive_.get(), context_.stream.get(),
                                                static_cast<int>(args_.size()), args_.data());
  if (status != dnnl_success) {
    return absl::InternalError(
        absl::StrCat(node, ": oneDNN primitive execution failed (status ", status, ")"));
  }
  return absl::OkStatus();
}

absl::Status WaitStream(CpuKernelContext& context, const std::string& node) {
  dnnl_status_t status = dnnl_stream_wait(context.stream.get());
  if (status != dnnl_success) {
    return absl::InternalError(
        absl::StrCat(node, ": oneDNN stream wait failed (status ", status, ")"));
  }
  return absl::OkStatus();
}

absl::Status PrimitiveKernel::Run(const RunContext&, const void* const* inputs,
                                  void* const* outputs) {
  absl::Status status = primitive_.Execute(inputs, outputs, node_);
  if (!status.ok()) return status;
  return WaitStream(context_, node_);
}

void PrimitiveKernel::SetNativeOutput(const dnnl::memory::desc& layout) {
  native_layout_ = SerializeDesc(layout);
  native_bytes_ = layout.get_size();
}

BoundPrimitive Reorder(CpuKernelContext& context, const dnnl::memory::desc& from,
                       const dnnl::memory::desc& to) {
  const dnnl::reorder::primitive_desc pd(context.engine, from, context.engine, to,
                                         UserScratchpadAttr());
  return BoundPrimitive(context, pd, dnnl::reorder(pd));
}

ConvertedInputKernel::ConvertedInputKernel(std::string node, BoundPrimitive convert,
                                           dnnl::memory converted, std::unique_ptr<Kernel> product)
    : node_(std::move(node)),
      convert_(std::move(convert)),
      converted_(std::move(converted)),
      product_(std::move(product)) {}

size_t ConvertedInputKernel::ConvertedBytes() const {
  constexpr size_t kAlignment = 64;
  return (converted_.get_desc().get_size() + kAlignment - 1) / kAlignment * kAlignment;
}

size_t ConvertedInputKernel::workspace_bytes() const {
  return ConvertedBytes() + product_->workspace_bytes();
}

void ConvertedInputKernel::SetWorkspace(void* workspace) {
  converted_.set_data_handle(workspace);
  product_->SetWorkspace(static_cast<char*>(workspace) + ConvertedBytes());
}

ConvertedOperand BindOperand(CpuKernelContext& context, BoundPrimitive& primitive, int arg,
                             const dnnl::memory::desc& given, const dnnl::memory::desc& read,
                             int index) {
  ConvertedOperand operand;
  if (read == given) {
    primitive.BindInput(arg, given, index);
    return operand;
  }
  operand.converted = dnnl::memory(read, context.engine, DNNL_MEMORY_NONE);
  primitive.BindFixed(arg, operand.converted);
  operand.convert.emplace(Reorder(context, given, read));
  operand.convert->BindInput(DNNL_ARG_FROM, given, index);
  operand.convert->BindFixed(DNNL_ARG_TO, operand.converted);
  return operand;
}

std::unique_ptr<Kernel> WithConvertedOperand(const std::string& node, ConvertedOperand operand,
                                             std::unique_ptr<Kernel> product) {
  if (!operand.convert) return product;
  return std::make_unique<ConvertedInputKernel>(node, *std::move(operand.convert),
                                                std::move(operand.converted), std::move(product));
}

absl::Status ConvertedInputKernel::Run(const RunContext& context, const void* const* inputs,
                                       void* const* outputs) {
  // The stream runs in order: the product, submitted after, reads the finished copy.
  REPLICAD_RETURN_IF_ERROR(convert_.Execute(inputs, outputs, node_));
  return product_->Run(context, inputs, outputs);
}

}  // namespace replicad
