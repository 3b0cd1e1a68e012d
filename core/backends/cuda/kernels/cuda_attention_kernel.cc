#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/attention_attributes.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using Builder = KernelOrStatus (*)(const KernelSpec&, CudaKernelContext&);

// The CUDA backend's replicad.Attention: the kernels it ran before the
// optimizer fused the pattern (index maps for the absorbed Transposes,
// cuBLAS for the two products, our element-wise kernels for the steps,
// cuDNN's softmax), one after another on the slot's stream, what passes
// between them in buffers of the workspace. It computes what the unfused
// graph did on this backend and keeps models that ran here running; the
// blocked kernel that never writes the scores out is the CPU backend's.
class CudaAttentionKernel : public Kernel {
 public:
  // Where a part reads or writes: an input of the fused node (>= 0), the
  // node's output, or a buffer of the workspace (kBuffer - j for buffer j).
  static constexpr int kOutput = -1;
  static constexpr int kBuffer = -2;

  struct Part {
    std::unique_ptr<Attributes> attributes;  // The part's spec points here.
    std::unique_ptr<Kernel> kernel;
    std::vector<int> reads;
    int writes = kOutput;
  };

  // A buffer of `bytes` in the workspace; its `where`.
  int AddBuffer(size_t bytes) {
    sizes_.push_back((bytes + 255) / 256 * 256);
    return kBuffer - static_cast<int>(sizes_.size() - 1);
  }
  // Makes buffer `where` hold at least `bytes` (a step's operand may add
  // batch dims to the scores).
  void GrowBuffer(int where, size_t bytes) {
    size_t& size = sizes_[kBuffer - where];
    size = std::max(size, (bytes + 255) / 256 * 256);
  }
  void AddPart(Part part) { parts_.push_back(std::move(part)); }

  size_t workspace_bytes() const override {
    size_t most = 0;
    for (const Part& part : parts_) most = std::max(most, part.kernel->workspace_bytes());
    return BuffersBytes() + most;
  }
  void SetWorkspace(void* workspace) override {
    workspace_ = static_cast<char*>(workspace);
    offsets_.clear();
    size_t offset = 0;
    for (size_t size : sizes_) {
      offsets_.push_back(offset);
      offset += size;
    }
    for (Part& part : parts_) part.kernel->SetWorkspace(workspace_ + offset);
  }

  absl::Status Run(const RunContext& context, const void* const* inputs,
                   void* const* outputs) override {
    auto at = [&](int where) -> void* {
      if (where == kOutput) return outputs[0];
      if (where <= kBuffer) return workspace_ + offsets_[kBuffer - where];
      return const_cast<void*>(inputs[where]);
    };
    for (Part& part : parts_) {
      std::vector<const void*> in;
      for (int r : part.reads) in.push_back(at(r));
      void* out[1] = {at(part.writes)};
      REPLICAD_RETURN_IF_ERROR(part.kernel->Run(context, in.data(), out));
    }
    return absl::OkStatus();
  }

 private:
  size_t BuffersBytes() const {
    size_t bytes = 0;
    for (size_t size : sizes_) bytes += size;
    return bytes;
  }

  std::vector<Part> parts_;
  std::vector<size_t> sizes_;    // Of each buffer, aligned.
  std::vector<size_t> offsets_;  // Set with the workspace.
  char* workspace_ = nullptr;
};

// One part: `op_type` over `inputs` (types) with `attributes`; its output
// type inferred into `*output`.
absl::StatusOr<CudaAttentionKernel::Part> MakePart(const KernelSpec& fused,
                                                   const std::string& op_type,
                                                   std::vector<TensorType> inputs,
                                                   Attributes attributes, Builder builder,
                                                   CudaKernelContext& context, TensorType* output) {
  CudaAttentionKernel::Part part;
  part.attributes = std::make_unique<Attributes>(std::move(attributes));
  KernelSpec spec;
  spec.op_type = op_type;
  spec.node_name = absl::StrCat(fused.node_name, "/", op_type);
  spec.attributes = part.attributes.get();
  for (TensorType& type : inputs) spec.inputs.push_back(std::move(type));
  spec.constant_inputs.assign(spec.inputs.size(), nullptr);
  spec.declared_outputs = 1;
  REPLICAD_RETURN_IF_ERROR(FindOp(op_type)->infer(&spec));
  *output = spec.outputs[0];
  REPLICAD_ASSIGN_OR_RETURN(part.kernel, builder(spec, context));
  return part;
}

size_t BytesOf(const TensorType& type) { return static_cast<size_t>(NumElements(type.shape)) * 4; }

}  // namespace

KernelOrStatus MakeCudaAttentionKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(AttentionLayout layout, ParseAttentionLayout(spec));
  auto kernel = std::make_unique<CudaAttentionKernel>();
  // `where` and type of each matrix: the input, or a buffer holding its
  // transpose where the optimizer absorbed one.
  int where[3];
  TensorType types[3];
  for (int i = 0; i < 3; ++i) {
    where[i] = i;
    types[i] = *spec.inputs[i];
    std::vector<int64_t> perm = *spec.attributes->GetInts(kAttentionPerms[i], {});
    if (perm.empty()) continue;
    Attributes attributes;
    attributes.Set("perm", std::move(perm));
    TensorType transposed;
    REPLICAD_ASSIGN_OR_RETURN(CudaAttentionKernel::Part part,
                              MakePart(spec, "Transpose", {types[i]}, std::move(attributes),
                                       MakeCudaIndexMapKernel, context, &transposed));
    part.reads = {i};
    part.writes = kernel->AddBuffer(BytesOf(transposed));
    where[i] = part.writes;
    types[i] = transposed;
    kernel->AddPart(std::move(part));
  }
  TensorType scores;
  REPLICAD_ASSIGN_OR_RETURN(
      CudaAttentionKernel::Part product,
      MakePart(spec, "MatMul", {types[0], types[1]}, {}, MakeCudaMatMulKernel, context, &scores));
  const int buffers[2] = {kernel->AddBuffer(BytesOf(scores)), kernel->AddBuffer(BytesOf(scores))};
  product.reads = {where[0], where[1]};
  product.writes = buffers[0];
  kernel->AddPart(std::move(product));
  int current = 0;
  for (const AttentionStep& step : layout.steps) {
    const bool fill = step.kind == AttentionStep::Kind::kFillWhere ||
                      step.kind == AttentionStep::Kind::kFillUnless;
    const TensorType operand = *spec.inputs[step.operand];
    CudaAttentionKernel::Part part;
    if (fill) {
      // A boolean mask's fill (masked_fill): Where(condition, operand, S)
      // or Where(condition, S, operand).
      const TensorType condition = *spec.inputs[step.condition];
      const bool where = step.kind == AttentionStep::Kind::kFillWhere;
      REPLICAD_ASSIGN_OR_RETURN(
          part, MakePart(spec, "Where",
                         where ? std::vector<TensorType>{condition, operand, scores}
                               : std::vector<TensorType>{condition, scores, operand},
                         {}, MakeCudaWhereKernel, context, &scores));
      part.reads = where ? std::vector<int>{step.condition, step.operand, buffers[current]}
                         : std::vector<int>{step.condition, buffers[current], step.operand};
    } else {
      const char* op = step.kind == AttentionStep::Kind::kMul   ? "Mul"
                       : step.kind == AttentionStep::Kind::kDiv ? "Div"
                                                                : "Add";
      REPLICAD_ASSIGN_OR_RETURN(
          part, MakePart(spec, op, {scores, operand}, {}, MakeCudaBinaryKernel, context, &scores));
      part.reads = {buffers[current], step.operand};
    }
    part.writes = buffers[1 - current];
    current = 1 - current;
    kernel->AddPart(std::move(part));
    for (int buffer : buffers) kernel->GrowBuffer(buffer, BytesOf(scores));
  }
  REPLICAD_ASSIGN_OR_RETURN(
      CudaAttentionKernel::Part softmax,
      MakePart(spec, "Softmax", {scores}, {}, MakeCudaSoftmaxKernel, context, &scores));
  softmax.reads = {buffers[current]};
  softmax.writes = buffers[1 - current];
  current = 1 - current;
  kernel->AddPart(std::move(softmax));
  TensorType y;
  REPLICAD_ASSIGN_OR_RETURN(
      CudaAttentionKernel::Part output,
      MakePart(spec, "MatMul", {scores, types[2]}, {}, MakeCudaMatMulKernel, context, &y));
  output.reads = {buffers[current], where[2]};
  std::vector<int64_t> perm = *spec.attributes->GetInts(kAttentionPerms[3], {});
  if (perm.empty()) {
    output.writes = CudaAttentionKernel::kOutput;
    kernel->AddPart(std::move(output));
    return kernel;
  }
  output.writes = kernel->AddBuffer(BytesOf(y));
  const int y_where = output.writes;
  kernel->AddPart(std::move(output));
  Attributes attributes;
  attributes.Set("perm", std::move(perm));
  TensorType transposed;
  REPLICAD_ASSIGN_OR_RETURN(CudaAttentionKernel::Part part,
                            MakePart(spec, "Transpose", {y}, std::move(attributes),
                                     MakeCudaIndexMapKernel, context, &transposed));
  part.reads = {y_where};
  part.writes = CudaAttentionKernel::kOutput;
  kernel->AddPart(std::move(part));
  return kernel;
}

}  // namespace replicad
