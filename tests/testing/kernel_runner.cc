#include "tests/testing/kernel_runner.h"

#include "absl/strings/str_cat.h"
#include "core/device/device_copy.h"
#include "core/ops/op_registry.h"

namespace replicad::testing {
namespace {

// The spec of `call` with its outputs inferred; it points into `call`.
absl::StatusOr<KernelSpec> SpecOf(const KernelCall& call) {
  const OpDefinition* op = FindOp(call.op_type);
  if (op == nullptr) return absl::NotFoundError(absl::StrCat("no op ", call.op_type));
  KernelSpec spec;
  spec.op_type = call.op_type;
  spec.node_name = "under_test";
  spec.opset = call.opset;
  spec.attributes = &call.attributes;
  for (const std::optional<Tensor>& input : call.inputs) {
    spec.inputs.push_back(input ? std::optional<TensorType>(input->type()) : std::nullopt);
    spec.constant_inputs.push_back(nullptr);
  }
  for (int i : call.constant_inputs) spec.constant_inputs.at(i) = &*call.inputs.at(i);
  if (absl::Status s = op->infer(&spec); !s.ok()) return s;
  return spec;
}

absl::StatusOr<std::vector<Tensor>> Run(Device& device, const KernelCall& call,
                                        const std::vector<Tensor>* initial_outputs) {
  absl::StatusOr<KernelSpec> spec = SpecOf(call);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = device.MakeKernel(*spec);
  if (!kernel.ok()) return kernel.status();

  std::vector<Tensor> inputs, outputs;
  std::vector<const void*> input_ptrs;
  for (const std::optional<Tensor>& input : call.inputs) {
    if (!input) {
      input_ptrs.push_back(nullptr);
      continue;
    }
    absl::StatusOr<Tensor> copy = CopyToDevice(device, *input);
    if (!copy.ok()) return copy.status();
    input_ptrs.push_back(copy->raw_data());
    inputs.push_back(*std::move(copy));
  }
  std::vector<void*> output_ptrs;
  for (size_t o = 0; o < spec->outputs.size(); ++o) {
    const TensorType& type = spec->outputs[o];
    Tensor output;
    if (initial_outputs != nullptr) {
      if (o >= initial_outputs->size() || !((*initial_outputs)[o].type() == type)) {
        return absl::InvalidArgumentError(
            absl::StrCat("initial output ", o, " must be ", TensorTypeToString(type)));
      }
      absl::StatusOr<Tensor> copy = CopyToDevice(device, (*initial_outputs)[o]);
      if (!copy.ok()) return copy.status();
      output = *std::move(copy);
    } else {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = device.Allocate(ByteSize(type));
      if (!buffer.ok()) return buffer.status();
      absl::StatusOr<Tensor> tensor = Tensor::Create(type.dtype, type.shape, *std::move(buffer));
      if (!tensor.ok()) return tensor.status();
      output = *std::move(tensor);
    }
    output_ptrs.push_back(output.raw_data());
    outputs.push_back(std::move(output));
  }
  std::shared_ptr<Buffer> device_workspace;
  if (const size_t bytes = (*kernel)->workspace_bytes(); bytes != 0) {
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = device.Allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    device_workspace = *std::move(buffer);
    (*kernel)->SetWorkspace(device_workspace->data());
  }

  absl::Status status;
  device.Enqueue([&] {
    status = (*kernel)->Run(call.context, input_ptrs.data(), output_ptrs.data());
    if (status.ok()) status = device.AwaitStream();
  });
  if (absl::Status s = device.Synchronize(); !s.ok()) return s;
  if (!status.ok()) return status;

  std::vector<Tensor> host;
  for (const Tensor& output : outputs) {
    Tensor copy = Tensor::Host(output.dtype(), output.shape());
    device.EnqueueCopy(output.raw_data(), output.location(), copy.raw_data(), copy.location(),
                       output.byte_size());
    host.push_back(std::move(copy));
  }
  if (absl::Status s = device.Synchronize(); !s.ok()) return s;
  return host;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> BuildKernel(Device& device, const KernelCall& call) {
  absl::StatusOr<KernelSpec> spec = SpecOf(call);
  if (!spec.ok()) return spec.status();
  return device.MakeKernel(*spec);
}

absl::StatusOr<std::vector<Tensor>> RunKernel(Device& device, const KernelCall& call) {
  return Run(device, call, nullptr);
}

absl::StatusOr<std::vector<Tensor>> RunKernelInPlace(Device& device, const KernelCall& call,
                                                     const std::vector<Tensor>& initial_outputs) {
  return Run(device, call, &initial_outputs);
}

}  // namespace replicad::testing
