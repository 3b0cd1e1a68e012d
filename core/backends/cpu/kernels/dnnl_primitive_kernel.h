#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_DNNL_PRIMITIVE_KERNEL_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_DNNL_PRIMITIVE_KERNEL_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: one oneDNN primitive whose argument memories
// are made once and only re-pointed per call.

// oneDNN's type for float32, int8, uint8 and int32 values (f32 for any
// other: callers pass only these).
dnnl::memory::data_type DnnlDataType(DType dtype);

// Plain row-major memory descriptor for `shape` (rank 0 becomes [1], since
// oneDNN has no scalars).
dnnl::memory::desc RowMajorDesc(const Shape& shape, dnnl::memory::data_type type);

// Primitive attributes every kernel starts from: a user-provided scratchpad,
// so that executing never allocates.
dnnl::primitive_attr UserScratchpadAttr();

// `host` (read as `plain`) in the layout `blocked`, from the context's weight
// cache, so that plans of other slice sizes share the copy; a copy of the
// caller's own when the context has no cache.
std::shared_ptr<const dnnl::memory> PreparedWeights(CpuKernelContext& context, const Tensor& host,
                                                    const dnnl::memory::desc& plain,
                                                    const dnnl::memory::desc& blocked);

// A primitive plus its bound arguments. Arguments come from the kernel's
// inputs or outputs by index (re-pointed on every Execute) or are fixed
// memories owned here (prepared weights); the scratchpad is the slot's
// shared one, looked up on every Execute. Not thread-safe:
// Execute runs on the context's stream thread, one call at a time.
class BoundPrimitive {
 public:
  // `pd` must have been made with UserScratchpadAttr(); the slot's shared
  // scratchpad grows to fit it.
  BoundPrimitive(CpuKernelContext& context, const dnnl::primitive_desc_base& pd,
                 dnnl::primitive primitive);

  // `byte_offset` into the buffer: a part of it (a range of channel blocks).
  void BindInput(int arg, const dnnl::memory::desc& desc, int input_index, size_t byte_offset = 0);
  void BindOutput(int arg, const dnnl::memory::desc& desc, int output_index,
                  size_t byte_offset = 0);
  void BindFixed(int arg, const dnnl::memory& memory);
  // A memory other kernels also hold (prepared weights): kept alive with this.
  void BindFixed(int arg, std::shared_ptr<const dnnl::memory> memory);
  // `desc`'s bytes from `byte_offset` into `memory`, which is kept alive with this.
  void BindFixedPart(int arg, std::shared_ptr<const dnnl::memory> memory,
                     const dnnl::memory::desc& desc, size_t byte_offset);

  // Points the bound memories at inputs/outputs and submits the primitive to
  // the stream without waiting. Internal naming `node` on a oneDNN error.
  absl::Status Execute(const void* const* inputs, void* const* outputs, const std::string& node);

 private:
  struct Binding {
    dnnl::memory memory;
    int index;  // Into inputs, or into outputs when `is_output`.
    bool is_output;
    size_t byte_offset;
  };

  CpuKernelContext& context_;
  dnnl::primitive primitive_;
  dnnl::memory scratchpad_;  // Empty when the primitive needs none.
  SlotScratchpad::Claim scratchpad_claim_;
  std::vector<dnnl::memory> fixed_;
  std::vector<std::shared_ptr<const dnnl::memory>> shared_;
  std::vector<Binding> bindings_;
  // Prebuilt so that Execute can call the C API without building the
  // std::unordered_map the C++ execute() takes (and copies into a vector).
  std::vector<dnnl_exec_arg_t> args_;
};

// A kernel that is exactly one bound primitive: Execute, then wait.
class PrimitiveKernel : public Kernel {
 public:
  PrimitiveKernel(CpuKernelContext& context, std::string node, BoundPrimitive primitive)
      : context_(context), node_(std::move(node)), primitive_(std::move(primitive)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override;

  // With KernelSpec::native_output: output 0 is written in `layout`.
  void SetNativeOutput(const dnnl::memory::desc& layout);
  std::string native_output_layout() const override { return native_layout_; }
  size_t native_output_bytes() const override { return native_bytes_; }

  // Where the primitive only joins its inputs' bytes (Kernel::joined_input_offsets).
  void SetJoinedInputOffsets(std::vector<size_t> offsets) { joined_offsets_ = std::move(offsets); }
  std::vector<size_t> joined_input_offsets() const override { return joined_offsets_; }

 private:
  CpuKernelContext& context_;
  std::string node_;
  BoundPrimitive primitive_;
  std::string native_layout_;
  size_t native_bytes_ = 0;
  std::vector<size_t> joined_offsets_;
};

// Waits for the stream; Internal naming `node` when oneDNN reports an error.
absl::Status WaitStream(CpuKernelContext& context, const std::string& node);

// A reorder from `from` to `to` (layouts, or f32 to bf16), arguments unbound.
BoundPrimitive Reorder(CpuKernelContext& context, const dnnl::memory::desc& from,
                       const dnnl::memory::desc& to);

// A product that reads its input 0 as another type (a matmul computed in
// bf16): `convert` (bound to input 0 and to `converted`) writes the copy
// into this kernel's workspace, then `product` (bound to `converted`) runs.
// The workspace, native output and overwritable input are `product`'s, after
// the copy's.
class ConvertedInputKernel : public Kernel {
 public:
  ConvertedInputKernel(std::string node, BoundPrimitive convert, dnnl::memory converted,
                       std::unique_ptr<Kernel> product);

  absl::Status Run(const RunContext& context, const void* const* inputs,
                   void* const* outputs) override;
  size_t workspace_bytes() const override;
  void SetWorkspace(void* workspace) override;
  std::string native_output_layout() const override { return product_->native_output_layout(); }
  size_t native_output_bytes() const override { return product_->native_output_bytes(); }
  int overwritable_input() const override { return product_->overwritable_input(); }

 private:
  size_t ConvertedBytes() const;

  std::string node_;
  BoundPrimitive convert_;
  dnnl::memory converted_;
  std::unique_ptr<Kernel> product_;
};

// An operand of a product: read as it arrives, or (a bf16 product) through
// a copy converted on every run.
struct ConvertedOperand {
  std::optional<BoundPrimitive> convert;  // Empty: read as given.
  dnnl::memory converted;
};

// Binds input `index`, arriving in `given`, as `arg` of `primitive` read as
// `read`: directly where the two are the same, else through a converted copy.
ConvertedOperand BindOperand(CpuKernelContext& context, BoundPrimitive& primitive, int arg,
                             const dnnl::memory::desc& given, const dnnl::memory::desc& read,
                             int index);

// `product` preceded by the operand's conversion, if it has one.
std::unique_ptr<Kernel> WithConvertedOperand(const std::string& node, ConvertedOperand operand,
                                             std::unique_ptr<Kernel> product);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_DNNL_PRIMITIVE_KERNEL_H_
