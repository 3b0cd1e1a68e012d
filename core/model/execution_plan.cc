#include "core/model/execution_plan.h"

#include <cstring>
#include <new>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/model/plan_builder.h"

namespace replicad {

absl::StatusOr<std::unique_ptr<ExecutionPlan>> ExecutionPlan::Create(
    const Graph& graph, const std::map<int, Tensor>& weights, Device& device,
    const std::vector<Shape>& input_shapes, std::shared_ptr<SharedPlanArena> shared_arena) {
  std::unique_ptr<ExecutionPlan> plan(new ExecutionPlan());
  plan->device_ = &device;
  plan->shared_arena_ = shared_arena;
  // Kernels are built and constants folded with the host's allocator too:
  // running out of memory there is the caller's ResourceExhausted, not an
  // abort of the process.
  try {
    Builder builder(graph, weights, device, plan.get());
    REPLICAD_RETURN_IF_ERROR(builder.Build(input_shapes));
    if (plan->part_ != nullptr) {
      // A data-dependent part reads values the first build may have written
      // over, kept in a backend's own layout, or left to the caller's
      // output buffers: the plan is built again knowing which.
      const std::vector<bool> part_reads = builder.part_reads();
      plan.reset(new ExecutionPlan());
      plan->device_ = &device;
      plan->shared_arena_ = std::move(shared_arena);
      Builder again(graph, weights, device, plan.get(), &part_reads);
      REPLICAD_RETURN_IF_ERROR(again.Build(input_shapes));
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of host memory while building the plan");
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a plan's table would exceed what this machine holds (", e.what(), ")"));
  }
  return plan;
}

size_t ExecutionPlan::own_bytes() const {
  size_t bytes = 0;
  for (const std::shared_ptr<Buffer>& buffer : {arena_, workspace_}) {
    if (buffer != nullptr) bytes += buffer->bytes();
  }
  for (const std::shared_ptr<Buffer>& constant : constants_) bytes += constant->bytes();
  return bytes;
}

ExecutionPlan::~ExecutionPlan() {
  if (counted_in_arena_) shared_arena_->RemovePlan(shared_bytes_);
}

namespace {

absl::Status NotForDataDependent() {
  return absl::FailedPreconditionError(
      "the plan computes values whose shapes depend on the request (RunToHost runs it)");
}

}  // namespace

bool ExecutionPlan::replayable() const {
  if (part_ != nullptr) return false;
  for (const Step& step : steps_) {
    if (!step.kernel->replayable()) return false;
  }
  return true;
}

absl::Status ExecutionPlan::Run(const void* const* inputs, void* const* outputs) {
  if (part_ != nullptr) return NotForDataDependent();
  return RunSteps(RunContext{}, inputs, outputs, steps_.size(), nullptr, nullptr);
}

absl::Status ExecutionPlan::Run(const void* const* inputs, void* const* outputs, Proceed proceed) {
  if (part_ != nullptr) return NotForDataDependent();
  return RunSteps(RunContext{}, inputs, outputs, steps_.size(), nullptr, nullptr, &proceed);
}

absl::Status ExecutionPlan::Run(const RunContext& context, const void* const* inputs,
                                void* const* outputs, const Proceed* proceed) {
  if (part_ != nullptr) return NotForDataDependent();
  return RunSteps(context, inputs, outputs, steps_.size(), nullptr, nullptr, proceed);
}

absl::Status ExecutionPlan::RunSplit(const RunContext& context, const void* const* inputs,
                                     void* const* outputs, const Node* boundary,
                                     double* seconds_before) {
  return RunSplit(context, inputs, outputs, boundary, seconds_before,
                  [](int) { return absl::OkStatus(); });
}

absl::Status ExecutionPlan::RunSplit(const RunContext& context, const void* const* inputs,
                                     void* const* outputs, const Node* boundary,
                                     double* seconds_before, OutputReady on_ready) {
  if (part_ != nullptr) {
    return absl::UnimplementedError(
        "training a model whose shapes depend on the request's values (NonZero, "
        "NonMaxSuppression, shapes computed from inputs)");
  }
  // Steps follow the graph's node order, and nodes live in one array.
  size_t split = 0;
  while (split < steps_.size() && steps_[split].node < boundary) ++split;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point split_time = start;
  absl::Status status = RunSteps(context, inputs, outputs, split, &split_time, &on_ready);
  if (split == steps_.size()) split_time = std::chrono::steady_clock::now();
  *seconds_before = std::chrono::duration<double>(split_time - start).count();
  return status;
}

absl::Status ExecutionPlan::RunSteps(const RunContext& context, const void* const* inputs,
                                     void* const* outputs, size_t split,
                                     std::chrono::steady_clock::time_point* split_time,
                                     const OutputReady* on_ready, const Proceed* proceed) {
  if (shared_arena_ != nullptr) {
    // The arena may have moved since this plan last ran (a larger plan grew it).
    absl::StatusOr<char*> base = shared_arena_->Reserve(shared_bytes_);
    if (!base.ok()) return base.status();
    for (const auto& [value, offset] : arena_offsets_) value_ptrs_[value] = *base + offset;
    if (workspace_bytes_ > 0 && *base != workspace_base_) {
      for (Step& step : steps_) step.kernel->SetWorkspace(*base + workspace_offset_);
      workspace_base_ = *base;
    }
  }
  for (size_t i = 0; i < input_values_.size(); ++i) {
    value_ptrs_[input_values_[i]] = const_cast<void*>(inputs[i]);
  }
  for (size_t j = 0; j < output_values_.size(); ++j) {
    if (output_values_[j] >= 0) value_ptrs_[output_values_[j]] = outputs[j];
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (s == split && split_time != nullptr) *split_time = std::chrono::steady_clock::now();
    Step& step = steps_[s];
    if (proceed != nullptr) {
      // Between kernels nothing is half done, so stopping here leaves the
      // plan (and its arena) as reusable as after a whole run.
      if (absl::Status wanted = (*proceed)(); !wanted.ok()) {
        return absl::Status(
            wanted.code(),
            absl::StrCat(wanted.message(), "; stopped before kernel ", s + 1, " of ", steps_.size(),
                         " (node '", step.node->name, "', ", step.node->op_type, ")"));
      }
    }
    void** args = arg_ptrs_.data() + step.args_begin;
    const int* values = arg_values_.data() + step.args_begin;
    for (size_t a = 0; a < step.num_inputs + step.num_outputs; ++a) {
      args[a] = values[a] >= 0 ? value_ptrs_[values[a]] : nullptr;
    }
    absl::Status status = step.kernel->Run(context, args, args + step.num_inputs);
    if (!status.ok()) return Builder::NodeError(*step.node, status);
    if (on_ready != nullptr) {
      for (int output : outputs_written_[s]) REPLICAD_RETURN_IF_ERROR((*on_ready)(output));
    }
  }
  const MemoryLocation here = device_->memory_location();
  for (const OutputCopy& copy : output_copies_) {
    REPLICAD_RETURN_IF_ERROR(device_->CopyOnStream(value_ptrs_[copy.value], here,
                                                   outputs[copy.output], here, copy.bytes));
  }
  if (on_ready != nullptr) {
    for (const OutputCopy& copy : output_copies_)
      REPLICAD_RETURN_IF_ERROR((*on_ready)(copy.output));
  }
  return absl::OkStatus();
}

absl::Status ExecutionPlan::RunToHost(const void* const* inputs, std::vector<Tensor>* outputs,
                                      const Proceed* proceed) {
  if (part_ == nullptr) {
    return absl::FailedPreconditionError(
        "RunToHost runs plans with a data-dependent part; this one has none (Run runs it)");
  }
  REPLICAD_RETURN_IF_ERROR(
      RunSteps(RunContext{}, inputs, nullptr, steps_.size(), nullptr, nullptr, proceed));
  // The part reads host tensors: views of host memory as it lies (the arena
  // stays put until this returns), copies of device memory.
  std::vector<std::optional<Tensor>> values(value_types_.size());
  const MemoryLocation here = device_->memory_location();
  const bool host_memory = here.kind == MemoryKind::kHost;
  for (int v : part_inputs_) {
    const TensorType& type = *value_types_[v];
    const size_t bytes = ByteSize(type);
    if (host_memory) {
      auto view = std::make_shared<Buffer>(value_ptrs_[v], bytes, here, Buffer::Release{});
      REPLICAD_ASSIGN_OR_RETURN(values[v], Tensor::Create(type.dtype, type.shape, view, 0));
      continue;
    }
    Tensor copy = Tensor::Host(type.dtype, type.shape);
    REPLICAD_RETURN_IF_ERROR(
        device_->CopyOnStream(value_ptrs_[v], here, copy.raw_data(), MemoryLocation{}, bytes));
    values[v] = std::move(copy);
  }
  if (!host_memory) REPLICAD_RETURN_IF_ERROR(device_->AwaitStream());
  // The part allocates as the request's values say: running out of memory
  // there is this request's ResourceExhausted, not an abort of the process.
  try {
    REPLICAD_RETURN_IF_ERROR(part_->Run(&values, proceed));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "out of host memory in the data-dependent part of the plan");
  }
  // Outputs of their own: views of the arena, constants and values an If
  // passed on are copied.
  outputs->clear();
  for (int v : graph_outputs_) {
    if (!values[v]) {
      return absl::InternalError("a data-dependent plan computed no value for an output");
    }
    const Tensor& value = *values[v];
    Tensor out = Tensor::Host(value.dtype(), value.shape());
    if (value.byte_size() > 0) std::memcpy(out.raw_data(), value.raw_data(), value.byte_size());
    outputs->push_back(std::move(out));
  }
  return absl::OkStatus();
}

}  // namespace replicad
