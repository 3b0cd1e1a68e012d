#include "core/train/optimizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/base/fatal.h"
#include "core/base/status_macros.h"
#include "core/device/run_context.h"
#include "core/ops/optimizer_step_attributes.h"
#include "core/ops/training_ops.h"
#include "core/train/standalone_kernel.h"

// The arithmetic, and why it matches PyTorch, is in core/ops/optimizer_step.h: the host
// loops here and the CUDA kernel call the same per-element functions.

namespace replicad {
namespace {

std::string EntryName(size_t param, const std::string& slot) {
  return absl::StrCat("param", param, ".", slot);
}

bool OnDevice(const Device* device) {
  return device != nullptr && device->memory_location().kind != MemoryKind::kHost;
}

}  // namespace

absl::Status ValidateOptimizerConfig(const OptimizerConfig& config) {
  return ValidateOptimizerHyperparameters(config, "optimizer.");
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                             std::vector<int64_t> parameter_sizes) {
  return Create(config, std::move(parameter_sizes), nullptr);
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                             std::vector<int64_t> parameter_sizes,
                                                             Device* device) {
  REPLICAD_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  for (size_t i = 0; i < parameter_sizes.size(); ++i) {
    if (parameter_sizes[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter_sizes[", i, "] must be >= 0; received ", parameter_sizes[i]));
    }
  }
  std::unique_ptr<Optimizer> optimizer(
      new Optimizer(config, std::move(parameter_sizes), OnDevice(device) ? device : nullptr));
  if (optimizer->device_ != nullptr) {
    REPLICAD_RETURN_IF_ERROR(optimizer->BuildDeviceState());
  }
  return optimizer;
}

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<int64_t> sizes, Device* device)
    : config_(config),
      sizes_(std::move(sizes)),
      device_(device),
      names_(OptimizerStateNames(config.kind, config.momentum)),
      index_(OptimizerStateIndexOf(config.kind, config.momentum)),
      params_(sizes_.size()) {}

Optimizer::~Optimizer() = default;

absl::Status Optimizer::BuildDeviceState() {
  // Not zeroed: the first update (t == 1) does not read the state.
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] == 0) continue;
    updated_.push_back(i);
    for (size_t k = 0; k < names_.size(); ++k) {
      REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                                device_->Allocate(static_cast<size_t>(sizes_[i]) * sizeof(float)));
      params_[i].device.push_back(std::move(buffer));
    }
  }
  return BuildDeviceKernel(kOptimizerStep, 1, "optimizer", step_kernel_);
}

absl::Status Optimizer::BuildDeviceKernel(std::string_view op_type, size_t inputs_per_parameter,
                                          std::string_view node_name, DeviceKernel& built) {
  if (updated_.empty()) return absl::OkStatus();
  // Only the kernel's build reads the node; it keeps what it needs.
  const Attributes attributes = OptimizerStepAttributes(config_);
  std::vector<Shape> shapes;
  for (size_t i : updated_) shapes.insert(shapes.end(), inputs_per_parameter, Shape{sizes_[i]});
  REPLICAD_ASSIGN_OR_RETURN(
      StandaloneKernel made,
      MakeStandaloneKernel(*device_, op_type, std::string(node_name), attributes, shapes));
  DeviceKernel kernel;
  kernel.kernel = std::move(made.kernel);
  kernel.workspace = std::move(made.workspace);
  kernel.inputs.resize(shapes.size());
  kernel.outputs.resize(made.outputs);
  built = std::move(kernel);
  return absl::OkStatus();
}

std::optional<Optimizer::NonFiniteUpdate> Optimizer::FirstNonFiniteUpdate(
    const std::vector<float*>& parameters, const std::vector<const float*>& gradients) const {
  if (device_ != nullptr) return std::nullopt;
  const OptimizerStepScalars scalars = MakeOptimizerStepScalars(config_, step_ + 1);
  // Before the first step there is no state; the first update does not read it.
  const std::vector<float> none;
  for (size_t i = 0; i < sizes_.size() && i < parameters.size() && i < gradients.size(); ++i) {
    if (sizes_[i] == 0) continue;
    std::vector<const float*> state;
    std::vector<float> zeros;
    if (step_ == 0) zeros.assign(static_cast<size_t>(sizes_[i]), 0.0f);
    for (size_t k = 0; k < names_.size(); ++k) {
      state.push_back(step_ == 0 ? zeros.data() : params_[i].host[k].data());
    }
    float after = 0;
    const int64_t bad = FirstNonFiniteUpdateOnHost(index_, scalars, parameters[i], gradients[i],
                                                   state.data(), sizes_[i], &after);
    if (bad >= 0) return NonFiniteUpdate{i, bad, parameters[i][bad], gradients[i][bad], after};
  }
  return std::nullopt;
}

absl::Status Optimizer::BuildDryRuns() {
  // Built whole or not at all: the flags come last, and they say "built".
  DeviceKernel dry_run;
  REPLICAD_RETURN_IF_ERROR(
      BuildDeviceKernel(kOptimizerDryRun, 2 + names_.size(), "optimizer dry run", dry_run));
  REPLICAD_ASSIGN_OR_RETURN(
      std::shared_ptr<Buffer> flags,
      device_->Allocate(std::max<size_t>(updated_.size(), 1) * sizeof(float)));
  dry_run_ = std::move(dry_run);
  dry_run_flags_host_.resize(updated_.size());
  dry_run_flags_ = std::move(flags);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> Optimizer::FindNonFiniteUpdate(
    const std::vector<float*>& parameters, const std::vector<const float*>& gradients) {
  if (device_ == nullptr) return FirstNonFiniteUpdate(parameters, gradients);
  if (dry_run_flags_ == nullptr) REPLICAD_RETURN_IF_ERROR(BuildDryRuns());
  if (updated_.empty()) return std::nullopt;
  RunContext context;
  context.step = step_ + 1;
  std::vector<float>& flags = dry_run_flags_host_;
  float* device_flags = static_cast<float*>(dry_run_flags_->data());
  const size_t per_parameter = 2 + names_.size();
  for (size_t u = 0; u < updated_.size(); ++u) {
    const size_t i = updated_[u];
    const void** inputs = dry_run_.inputs.data() + u * per_parameter;
    inputs[0] = gradients[i];
    inputs[1] = parameters[i];
    for (size_t k = 0; k < names_.size(); ++k) inputs[2 + k] = params_[i].device[k]->data();
    dry_run_.outputs[u] = device_flags + u;
  }
  absl::Status status;
  device_->Enqueue([&] {
    status = dry_run_.kernel->Run(context, dry_run_.inputs.data(), dry_run_.outputs.data());
    if (status.ok()) {
      status = device_->CopyOnStream(device_flags, device_->memory_location(), flags.data(),
                                     MemoryLocation{}, flags.size() * sizeof(float));
    }
  });
  REPLICAD_RETURN_IF_ERROR(device_->Synchronize());
  REPLICAD_RETURN_IF_ERROR(status);
  for (size_t u = 0; u < updated_.size(); ++u) {
    const size_t i = updated_[u];
    if (flags[u] != 1.0f) return FindOnHostCopies(i, parameters[i], gradients[i]);
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> Optimizer::FindOnHostCopies(
    size_t i, const float* p, const float* g) {
  const size_t n = static_cast<size_t>(sizes_[i]);
  std::vector<float> host_p(n), host_g(n);
  // Before the first step the state is not read (zeros, as on the host).
  std::vector<std::vector<float>> host_state(names_.size(), std::vector<float>(n, 0.0f));
  const MemoryLocation where = device_->memory_location();
  device_->EnqueueCopy(p, where, host_p.data(), MemoryLocation{}, n * sizeof(float));
  device_->EnqueueCopy(g, where, host_g.data(), MemoryLocation{}, n * sizeof(float));
  for (size_t k = 0; k < names_.size() && step_ > 0; ++k) {
    device_->EnqueueCopy(params_[i].device[k]->data(), where, host_state[k].data(),
                         MemoryLocation{}, n * sizeof(float));
  }
  REPLICAD_RETURN_IF_ERROR(device_->Synchronize());
  std::vector<const float*> state;
  for (const std::vector<float>& s : host_state) state.push_back(s.data());
  float after = 0;
  const int64_t bad =
      FirstNonFiniteUpdateOnHost(index_, MakeOptimizerStepScalars(config_, step_ + 1),
                                 host_p.data(), host_g.data(), state.data(), sizes_[i], &after);
  if (bad < 0) {
    return absl::InternalError(absl::StrCat(
        "the device's dry run of parameter ", i,
        " found an update that is not finite, but the host's run of the same rule did not"));
  }
  return NonFiniteUpdate{i, bad, host_p[bad], host_g[bad], after};
}

absl::Status Optimizer::Step(const std::vector<float*>& parameters,
                             const std::vector<const float*>& gradients) {
  if (parameters.size() != sizes_.size() || gradients.size() != sizes_.size()) {
    FatalProgrammerError(
        "optimizer",
        absl::StrCat("Step got ", parameters.size(), " parameters and ", gradients.size(),
                     " gradients for ", sizes_.size(), " parameter sizes"));
  }
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] != 0 && (parameters[i] == nullptr || gradients[i] == nullptr)) {
      FatalProgrammerError("optimizer", absl::StrCat("Step got a null pointer for parameter ", i));
    }
  }
  if (device_ != nullptr) return DeviceStep(parameters, gradients);

  // PyTorch allocates state on the first step (zeros; the first update does not read it).
  if (step_ == 0) {
    for (size_t i = 0; i < sizes_.size(); ++i) {
      params_[i].host.assign(names_.size(), std::vector<float>(static_cast<size_t>(sizes_[i])));
    }
  }
  const OptimizerStepScalars scalars = MakeOptimizerStepScalars(config_, step_ + 1);
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] != 0) HostStep(i, parameters[i], gradients[i], scalars);
  }
  ++step_;
  return absl::OkStatus();
}

void Optimizer::HostStep(size_t i, float* p, const float* g, const OptimizerStepScalars& s) {
  std::vector<float*> state;
  for (std::vector<float>& tensor : params_[i].host) state.push_back(tensor.data());
  UpdateParameterOnHost(index_, s, p, g, state.data(), sizes_[i]);
}

absl::Status Optimizer::DeviceStep(const std::vector<float*>& parameters,
                                   const std::vector<const float*>& gradients) {
  // The kernel reads the update number, and nothing else, from the context.
  RunContext context;
  context.step = step_ + 1;
  if (!updated_.empty()) {
    const size_t per_parameter = 1 + names_.size();
    for (size_t u = 0; u < updated_.size(); ++u) {
      const size_t i = updated_[u];
      step_kernel_.inputs[u] = gradients[i];
      void** outputs = step_kernel_.outputs.data() + u * per_parameter;
      outputs[0] = parameters[i];
      for (size_t k = 0; k < names_.size(); ++k) outputs[1 + k] = params_[i].device[k]->data();
    }
    REPLICAD_RETURN_IF_ERROR(
        step_kernel_.kernel->Run(context, step_kernel_.inputs.data(), step_kernel_.outputs.data()));
  }
  ++step_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> Optimizer::State() const {
  std::vector<std::pair<std::string, Tensor>> state;
  if (step_ == 0) return state;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    for (size_t k = 0; k < names_.size(); ++k) {
      Tensor tensor = Tensor::Host(DType::kFloat32, {sizes_[i]});
      if (sizes_[i] != 0) {
        if (device_ != nullptr) {
          device_->EnqueueCopy(params_[i].device[k]->data(), device_->memory_location(),
                               tensor.raw_data(), MemoryLocation{}, tensor.byte_size());
        } else {
          std::memcpy(tensor.raw_data(), params_[i].host[k].data(), tensor.byte_size());
        }
      }
      state.emplace_back(EntryName(i, names_[k]), std::move(tensor));
    }
  }
  // The tensors are the copies' destinations: they are complete once the stream is idle.
  if (device_ != nullptr) {
    REPLICAD_RETURN_IF_ERROR(device_->Synchronize());
  }
  return state;
}

absl::Status Optimizer::Restore(int64_t step,
                                const std::vector<std::pair<std::string, Tensor>>& state) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state step must be >= 0; received ", step));
  }
  // Entry name -> (parameter, index in names_) for every entry State() would give at `step`.
  std::map<std::string, std::pair<size_t, size_t>> expected;
  if (step > 0) {
    for (size_t i = 0; i < sizes_.size(); ++i) {
      for (size_t k = 0; k < names_.size(); ++k) expected[EntryName(i, names_[k])] = {i, k};
    }
  }
  const std::string kind = OptimizerKindName(config_.kind);
  std::set<std::string> seen;
  for (const auto& [name, tensor] : state) {
    auto it = expected.find(name);
    if (it == expected.end()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state entry ", name,
                                                     " is not used by ", kind, " with ",
                                                     sizes_.size(), " parameters at step ", step));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state entry ", name, " appears twice"));
    }
    const int64_t size = sizes_[it->second.first];
    if (tensor.buffer() == nullptr || !(tensor.location() == MemoryLocation{}) ||
        tensor.dtype() != DType::kFloat32 || tensor.num_elements() != size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state entry ", name, " must be a host float32 tensor of ", size,
          " elements; received ",
          tensor.buffer() == nullptr ? std::string("an empty tensor")
                                     : absl::StrCat(TensorTypeToString(tensor.type()), " in ",
                                                    MemoryLocationToString(tensor.location()))));
    }
  }
  for (const auto& [name, unused] : expected) {
    if (seen.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state entry ", name, " is missing (", kind, " at step ", step, ")"));
    }
  }
  if (device_ != nullptr) {
    // The device buffers stay allocated; at step 0 the first update will not read them.
    for (const auto& [name, tensor] : state) {
      const auto& [param, k] = expected.at(name);
      if (sizes_[param] == 0) continue;  // Nothing allocated.
      device_->EnqueueCopy(tensor.raw_data(), MemoryLocation{}, params_[param].device[k]->data(),
                           device_->memory_location(), tensor.byte_size());
    }
    REPLICAD_RETURN_IF_ERROR(device_->Synchronize());
  } else {
    for (Parameter& param : params_) param.host.clear();
    if (step > 0) {
      for (Parameter& param : params_) param.host.resize(names_.size());
    }
    for (const auto& [name, tensor] : state) {
      const auto& [param, k] = expected.at(name);
      const float* data = tensor.data<float>();
      params_[param].host[k].assign(data, data + sizes_[param]);
    }
  }
  step_ = step;
  return absl::OkStatus();
}

}  // namespace replicad
