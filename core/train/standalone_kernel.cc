#include "core/train/standalone_kernel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/op_registry.h"

namespace replicad {

absl::StatusOr<StandaloneKernel> MakeStandaloneKernel(Device& device, std::string_view op_type,
                                                      std::string node_name,
                                                      const Attributes& attributes,
                                                      const std::vector<Shape>& shapes) {
  const OpDefinition* op = FindOp(op_type);
  if (op == nullptr)
    return absl::InternalError(absl::StrCat(std::string(op_type), " is not registered"));
  KernelSpec spec;
  spec.op_type = std::string(op_type);
  spec.node_name = std::move(node_name);
  spec.attributes = &attributes;
  for (const Shape& shape : shapes) {
    spec.inputs.push_back(TensorType{DType::kFloat32, shape});
    spec.constant_inputs.push_back(nullptr);
  }
  REPLICAD_RETURN_IF_ERROR(op->infer(&spec));
  StandaloneKernel made;
  made.outputs = spec.outputs.size();
  REPLICAD_ASSIGN_OR_RETURN(made.kernel, device.MakeKernel(spec));
  if (const size_t bytes = made.kernel->workspace_bytes(); bytes != 0) {
    REPLICAD_ASSIGN_OR_RETURN(made.workspace, device.Allocate(bytes));
    made.kernel->SetWorkspace(made.workspace->data());
  }
  return made;
}

}  // namespace replicad
