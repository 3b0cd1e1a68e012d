#include "tests/testing/onnx_node_runner.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/model/onnx_import.h"
#include "core/ops/op_registry.h"
#include "core/serve/replica.h"

namespace replicad {

absl::StatusOr<std::vector<Tensor>> RunOnnxModel(const onnx::ModelProto& model,
                                                 const std::vector<Tensor>& inputs,
                                                 DeviceId device_id) {
  std::set<std::string> value_inputs;  // Graph inputs read as values by a shape rule.
  for (const onnx::NodeProto& node : model.graph().node()) {
    const OpDefinition* op = FindOp(node.op_type());
    // Operators computed from their values (NonZero, NonMaxSuppression) get
    // theirs per request, in the plan's data-dependent part, as in a model.
    for (int i = 0; op != nullptr && op->evaluate == nullptr && i < node.input_size(); ++i) {
      if (op->NeedsValue(i)) value_inputs.insert(node.input(i));
    }
  }
  std::set<std::string> initializers;
  for (const auto& init : model.graph().initializer()) initializers.insert(init.name());

  OnnxImportOptions options;
  std::vector<Tensor> fed;
  size_t next = 0;
  for (const auto& input : model.graph().input()) {
    if (initializers.count(input.name())) continue;
    if (next >= inputs.size()) return absl::InvalidArgumentError("too few inputs");
    if (value_inputs.count(input.name())) {
      options.bind_inputs[input.name()] = inputs[next++];
    } else {
      fed.push_back(inputs[next++]);
    }
  }
  absl::StatusOr<std::shared_ptr<const Model>> loaded =
      LoadOnnxBytes(model.SerializeAsString(), model.graph().name(), "model.onnx", options);
  if (!loaded.ok()) return loaded.status();

  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return devices.status();
  const DeviceInfo* info = FindDevice(*devices, device_id);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(DeviceIdToString(device_id), " is not present"));
  }
  absl::StatusOr<std::unique_ptr<Device>> slot = CreateDevice(*info, SlotOptions{});
  if (!slot.ok()) return slot.status();
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      Replica::Create(*loaded, SlotAssignment{"r0", info->id, 1}, *std::move(slot));
  if (!replica.ok()) return replica.status();
  std::vector<Shape> shapes;
  std::vector<const void*> in;
  for (const Tensor& t : fed) {
    shapes.push_back(t.shape());
    in.push_back(t.raw_data());
  }
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = (*replica)->PlanFor(shapes);
  if (!plan.ok()) return plan.status();
  std::vector<Tensor> outputs;
  absl::Status status;
  Device& device = (*replica)->device();
  if ((*plan)->data_dependent()) {
    Replica::SlicePlan whole;
    whole.chunk = whole.last = *plan;
    device.Enqueue([&] { status = (*replica)->RunSliceToHost(whole, in.data(), &outputs); });
    if (absl::Status s = device.Synchronize(); !s.ok()) return s;
    if (!status.ok()) return status;
    return outputs;
  }
  std::vector<void*> out;
  for (const TensorType& type : (*plan)->output_types()) {
    outputs.push_back(Tensor::Host(type.dtype, type.shape));
    out.push_back(outputs.back().raw_data());
  }
  device.Enqueue([&] { status = (*replica)->RunOnHost(**plan, in.data(), out.data()); });
  if (absl::Status s = device.Synchronize(); !s.ok()) return s;
  if (!status.ok()) return status;
  return outputs;
}

}  // namespace replicad
