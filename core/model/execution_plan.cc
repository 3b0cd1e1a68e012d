#include "core/model/execution_plan.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status_macros.h"
#include "core/model/arena_planner.h"
#include "core/ops/constant_value.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

absl::Status NodeError(const Node& node, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("node '", node.name, "' (", node.op_type,
                                                  "): ", status.message()));
}

}  // namespace

// Builds one ExecutionPlan: walks the graph once, inferring types, folding
// what is known at plan time and making a step of everything else.
class ExecutionPlan::Builder {
 public:
  Builder(const Graph& graph, const std::map<int, Tensor>& weights, Device& device,
          ExecutionPlan* plan)
      : graph_(graph),
        weights_(weights),
        device_(device),
        plan_(*plan),
        types_(graph.values.size()),
        host_values_(graph.values.size(), nullptr),
        first_step_(graph.values.size(), -1),
        last_step_(graph.values.size(), -1),
        is_output_(graph.values.size(), false),
        readers_(graph.values.size()),
        layouts_(graph.values.size()),
        native_bytes_(graph.values.size(), 0),
        placed_in_(graph.values.size(), -1),
        placed_at_(graph.values.size(), 0) {
    plan_.value_ptrs_.assign(graph.values.size(), nullptr);
    for (int v : graph.outputs) is_output_[v] = true;
    for (const Node& node : graph.nodes) {
      for (int v : node.inputs) {
        if (v >= 0) readers_[v].push_back(&node);
      }
    }
  }

  absl::Status Build(const std::vector<Shape>& input_shapes) {
    REPLICAD_RETURN_IF_ERROR(BindInitializersAndInputs(input_shapes));
    for (const Node& node : graph_.nodes) {
      if (absl::Status s = AddNode(node); !s.ok()) return NodeError(node, s);
    }
    std::vector<bool> dropped = ViewsInsteadOfCopies();
    OutputsOverDeadInputs(dropped);
    DropSteps(dropped);
    REPLICAD_RETURN_IF_ERROR(PlaceOutputs());
    REPLICAD_RETURN_IF_ERROR(PlaceIntermediates());
    REPLICAD_RETURN_IF_ERROR(PlaceWorkspace());
    plan_.value_types_ = types_;
    // Constant uploads done before the first Run, and their failures (which
    // EnqueueCopy can only keep for Synchronize) this plan's, not a later one's.
    return device_.Synchronize();
  }

 private:
  absl::Status BindInitializersAndInputs(const std::vector<Shape>& input_shapes) {
    if (input_shapes.size() != graph_.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan needs ", graph_.inputs.size(), " input shapes; received ", input_shapes.size()));
    }
    for (const auto& [v, tensor] : graph_.initializers) {
      auto it = weights_.find(v);
      if (it == weights_.end()) {
        return absl::InternalError(
            absl::StrCat("no device copy of initializer '", graph_.values[v].name, "'"));
      }
      types_[v] = tensor.type();
      host_values_[v] = &tensor;
      plan_.value_ptrs_[v] = it->second.raw_data();
    }
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      const int v = graph_.inputs[i];
      types_[v] = TensorType{graph_.values[v].type.dtype, input_shapes[i]};
      plan_.input_types_.push_back(*types_[v]);
      plan_.input_values_.push_back(v);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<KernelSpec> SpecFor(const Node& node) {
    KernelSpec spec;
    spec.op_type = node.op_type;
    spec.node_name = node.name;
    spec.opset = graph_.opset;
    spec.attributes = &node.attributes;
    spec.declared_outputs = static_cast<int>(node.outputs.size());
    for (int v : node.inputs) {
      if (v == Node::kAbsentInput) {
        spec.inputs.push_back(std::nullopt);
        spec.constant_inputs.push_back(nullptr);
        continue;
      }
      if (!types_[v]) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", graph_.values[v].name, "' is produced by no node"));
      }
      spec.inputs.push_back(types_[v]);
      spec.constant_inputs.push_back(host_values_[v]);
    }
    return spec;
  }

  absl::Status AddNode(const Node& node) {
    absl::StatusOr<KernelSpec> spec = SpecFor(node);
    if (!spec.ok()) return spec.status();
    if (node.op_type == "Constant") {
      REPLICAD_ASSIGN_OR_RETURN(Tensor value, ConstantValue(*spec));
      return AddKnownValue(node.outputs[0], std::move(value));
    }
    const OpDefinition* op = FindOp(node.op_type);
    if (op == nullptr) return absl::UnimplementedError("unsupported operator");
    REPLICAD_RETURN_IF_ERROR(op->infer(&*spec));
    // A model file can ask for outputs no machine holds (Tile by 2^62):
    // refused before anything is allocated, naming the node.
    REPLICAD_RETURN_IF_ERROR(CheckOutputBytes(*spec, int64_t{1} << 40));
    if (spec->outputs.size() < node.outputs.size()) {
      return absl::UnimplementedError(absl::StrCat("the engine computes ", spec->outputs.size(),
                                                   " outputs; the model asks for ",
                                                   node.outputs.size()));
    }
    spec->outputs.resize(node.outputs.size());
    // Shape's value follows from its input's type, which the plan knows, so
    // Shape -> Gather -> Concat -> Reshape chains fold away at plan time.
    if (node.op_type == "Shape") {
      REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(*spec));
      return AddKnownValue(node.outputs[0], std::move(value));
    }
    const bool known = std::all_of(node.inputs.begin(), node.inputs.end(),
                                   [&](int v) { return v < 0 || host_values_[v] != nullptr; });
    spec->native_output = !known && KeepsNativeLayout(node);
    if (std::any_of(node.inputs.begin(), node.inputs.end(),
                    [&](int v) { return v >= 0 && !layouts_[v].empty(); })) {
      for (int v : node.inputs) spec->input_layouts.push_back(v >= 0 ? layouts_[v] : "");
    }
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = device_.MakeKernel(*spec);
    if (!kernel.ok()) {
      Device* host = device_.host_folding_device();
      if (known && host != nullptr && absl::IsUnimplemented(kernel.status())) {
        return FoldOnHost(node, *spec, *host);
      }
      return kernel.status();
    }
    if (known) return Fold(node, *spec, **kernel);
    if (spec->native_output) {
      layouts_[node.outputs[0]] = (*kernel)->native_output_layout();
      native_bytes_[node.outputs[0]] = (*kernel)->native_output_bytes();
    }
    AddStep(node, *spec, *std::move(kernel));
    return absl::OkStatus();
  }

  // A node whose every reader takes its output in the backend's own layout
  // may hand it over that way: the conversions to row-major and back are what
  // a run of convolutions (with the element-wise and pooling steps between
  // them) would otherwise spend much of its time on.
  bool KeepsNativeLayout(const Node& node) const {
    static constexpr const char* kProducers[] = {"Conv",   "Add",     "Mul",
                                                 "Concat", "MaxPool", "AveragePool"};
    if (std::find_if(std::begin(kProducers), std::end(kProducers),
                     [&](const char* op) { return node.op_type == op; }) == std::end(kProducers) ||
        node.outputs.size() != 1) {
      return false;
    }
    const int v = node.outputs[0];
    if (is_output_[v] || readers_[v].empty()) return false;
    return std::all_of(readers_[v].begin(), readers_[v].end(),
                       [&](const Node* reader) { return TakesNativeLayout(*reader, v); });
  }

  // Where `reader` runs on `v` in the layout it arrives in. Backends take any
  // layout anywhere (converting where they must), so this only says where
  // keeping one pays.
  static bool TakesNativeLayout(const Node& reader, int v) {
    const auto uses = std::count(reader.inputs.begin(), reader.inputs.end(), v);
    // A Conv reads its X, and the addend of a fused residual Add (input 3),
    // in any layout; its weights and bias stay row-major.
    if (reader.op_type == "Conv") {
      return uses == 1 &&
             (reader.inputs[0] == v || (reader.inputs.size() > 3 && reader.inputs[3] == v));
    }
    if (reader.op_type == "Add" || reader.op_type == "Mul") return uses == 1;
    // A ReduceMean over the spatial dims reads the layout in place (the CPU
    // backend's global average pooling); others reorder it first.
    if (reader.op_type == "ReduceMean") return reader.inputs[0] == v && uses == 1;
    return reader.op_type == "Concat" || reader.op_type == "GlobalAveragePool" ||
           reader.op_type == "MaxPool" || reader.op_type == "AveragePool";
  }

  // A value known now: uploaded once, read by shape rules as a host tensor.
  absl::Status AddKnownValue(int v, Tensor host) {
    types_[v] = host.type();
    plan_.host_constants_.push_back(std::move(host));
    const Tensor& value = plan_.host_constants_.back();
    host_values_[v] = &value;
    absl::StatusOr<std::shared_ptr<Buffer>> copy = device_.Allocate(value.byte_size());
    if (!copy.ok()) return copy.status();
    device_.EnqueueCopy(value.raw_data(), value.location(), (*copy)->data(),
                        device_.memory_location(), value.byte_size());
    plan_.value_ptrs_[v] = (*copy)->data();
    plan_.constants_.push_back(*std::move(copy));
    return absl::OkStatus();
  }

  // Every input is known: run the kernel once now and keep its outputs as
  // constants, so no request pays for it (constant folding).
  absl::Status Fold(const Node& node, const KernelSpec& spec, Kernel& kernel) {
    std::vector<void*> args;
    for (int v : node.inputs) args.push_back(v < 0 ? nullptr : plan_.value_ptrs_[v]);
    std::vector<std::shared_ptr<Buffer>> outputs;
    for (const TensorType& type : spec.outputs) {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = device_.Allocate(ByteSize(type));
      if (!buffer.ok()) return buffer.status();
      args.push_back((*buffer)->data());
      outputs.push_back(*std::move(buffer));
    }
    std::shared_ptr<Buffer> workspace;
    if (kernel.workspace_bytes() > 0) {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer = device_.Allocate(kernel.workspace_bytes());
      if (!buffer.ok()) return buffer.status();
      workspace = *std::move(buffer);
      kernel.SetWorkspace(workspace->data());
    }
    // Folded at Create, outside any training step.
    absl::Status status;
    device_.Enqueue(
        [&] { status = kernel.Run(RunContext{}, args.data(), args.data() + node.inputs.size()); });
    REPLICAD_RETURN_IF_ERROR(device_.Synchronize());
    if (!status.ok()) return status;
    for (size_t o = 0; o < outputs.size(); ++o) {
      const int v = node.outputs[o];
      Tensor host = Tensor::Host(spec.outputs[o].dtype, spec.outputs[o].shape);
      device_.EnqueueCopy(outputs[o]->data(), device_.memory_location(), host.raw_data(),
                          MemoryLocation{}, host.byte_size());
      types_[v] = host.type();
      plan_.host_constants_.push_back(std::move(host));
      host_values_[v] = &plan_.host_constants_.back();
      plan_.value_ptrs_[v] = outputs[o]->data();
      plan_.constants_.push_back(std::move(outputs[o]));
    }
    return device_.Synchronize();
  }

  // Fold on the device's host folding device (Device::host_folding_device):
  // its kernel reads the inputs' host values and writes host tensors, which
  // become constants like any known value.
  absl::Status FoldOnHost(const Node& node, KernelSpec spec, Device& host) {
    spec.native_output = false;
    spec.input_layouts.clear();
    // Slots of one process share the host device: one fold at a time.
    static absl::Mutex* const host_folding = new absl::Mutex();
    absl::MutexLock lock(host_folding);
    REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, host.MakeKernel(spec));
    std::vector<void*> args;
    for (int v : node.inputs) {
      args.push_back(v < 0 ? nullptr : const_cast<void*>(host_values_[v]->raw_data()));
    }
    std::vector<Tensor> outputs;
    for (const TensorType& type : spec.outputs) {
      outputs.push_back(Tensor::Host(type.dtype, type.shape));
      args.push_back(outputs.back().raw_data());
    }
    std::vector<char> workspace(kernel->workspace_bytes());
    kernel->SetWorkspace(workspace.data());
    absl::Status status;
    host.Enqueue(
        [&] { status = kernel->Run(RunContext{}, args.data(), args.data() + node.inputs.size()); });
    REPLICAD_RETURN_IF_ERROR(host.Synchronize());
    REPLICAD_RETURN_IF_ERROR(status);
    for (size_t o = 0; o < outputs.size(); ++o) {
      REPLICAD_RETURN_IF_ERROR(AddKnownValue(node.outputs[o], std::move(outputs[o])));
    }
    return absl::OkStatus();
  }

  void AddStep(const Node& node, const KernelSpec& spec, std::unique_ptr<Kernel> kernel) {
    const int step = static_cast<int>(plan_.steps_.size());
    Step s;
    s.kernel = std::move(kernel);
    s.node = &node;
    s.args_begin = plan_.arg_values_.size();
    s.num_inputs = node.inputs.size();
    s.num_outputs = node.outputs.size();
    for (int v : node.inputs) {
      plan_.arg_values_.push_back(v);
      if (v >= 0 && first_step_[v] >= 0) last_step_[v] = step;
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int v = node.outputs[o];
      types_[v] = spec.outputs[o];
      plan_.arg_values_.push_back(v);
      if (!is_output_[v]) first_step_[v] = last_step_[v] = step;
    }
    plan_.steps_.push_back(std::move(s));
  }

  // A step whose output is nothing but input bytes (Kernel::
  // joined_input_offsets: a concatenation along channels at batch 1, a
  // Reshape) costs nothing when producers and readers share the bytes: the
  // step is dropped, and its inputs become views of its output at their
  // offsets, or, where they already are views of one buffer at the right
  // distances, the output becomes a view of that buffer. Later steps are
  // placed first, so nested concatenations land in the outermost buffer,
  // and a chain of them (a densenet block concatenates ever more of the same
  // features, each list a prefix of the last) collapses into one.
  // Returns the steps to drop (DropSteps).
  std::vector<bool> ViewsInsteadOfCopies() {
    std::vector<bool> dropped(plan_.steps_.size(), false);
    for (size_t s = plan_.steps_.size(); s-- > 0;) {
      const Step& step = plan_.steps_[s];
      const std::vector<size_t> offsets = step.kernel->joined_input_offsets();
      const int* inputs = plan_.arg_values_.data() + step.args_begin;
      const int out = inputs[step.num_inputs];
      if (offsets.size() != step.num_inputs || step.num_outputs != 1 || first_step_[out] < 0) {
        continue;
      }
      std::vector<Part> parts;
      for (size_t i = 0; i < offsets.size(); ++i) {
        if (offsets[i] != Kernel::kNotJoined) parts.push_back({inputs[i], offsets[i]});
      }
      dropped[s] =
          !parts.empty() && (PlacePartsInOutput(parts, out) || ViewOfPlacedParts(parts, out));
    }
    return dropped;
  }

  // A step that computes output 0 on top of a copy of one input's bytes
  // (Kernel::overwritable_input: a convolution onto its residual addend)
  // writes over that input where no later step reads it: output 0 becomes a
  // view at the input's place, and the kernel skips the copy. The buffer
  // the input lies in may hold other values (views: a concatenation's
  // parts, an earlier output written over its input, as along a chain of
  // residual blocks) only where every one of them was last read before
  // this step, so no bytes that are still to be read are overwritten. Runs
  // before DropSteps, while step indices still match last_step_.
  void OutputsOverDeadInputs(const std::vector<bool>& dropped) {
    // Last step that reads any value in `root`'s buffer other than `in`.
    const auto others_last_read = [&](int root, int in) {
      int last = -1;
      for (size_t v = 0; v < placed_in_.size(); ++v) {
        if (static_cast<int>(v) != in && RootOf(static_cast<int>(v)) == root) {
          last = std::max(last, last_step_[v]);
        }
      }
      return last;
    };
    const auto holds_views = [&](int root) {
      return std::find(placed_in_.begin(), placed_in_.end(), root) != placed_in_.end();
    };
    for (size_t s = 0; s < plan_.steps_.size(); ++s) {
      const Step& step = plan_.steps_[s];
      const int i = step.kernel->overwritable_input();
      if (dropped[s] || i < 0 || static_cast<size_t>(i) >= step.num_inputs ||
          step.num_outputs < 1) {
        continue;
      }
      const int* args = plan_.arg_values_.data() + step.args_begin;
      const int in = args[i];
      const int out = args[step.num_inputs];
      if (in < 0 || first_step_[in] < 0 || last_step_[in] != static_cast<int>(s) ||
          std::count(args, args + step.num_inputs, in) != 1 || first_step_[out] < 0 ||
          placed_in_[out] >= 0 || holds_views(out) || StoredBytes(out) > StoredBytes(in) ||
          others_last_read(RootOf(in), in) >= static_cast<int>(s)) {
        continue;
      }
      placed_in_[out] = RootOf(in);
      placed_at_[out] = placed_at_[in];  // 0 where `in` is its own buffer.
      ++plan_.overwriting_steps_;
    }
  }

  void DropSteps(const std::vector<bool>& dropped) {
    size_t kept = 0;
    for (size_t s = 0; s < plan_.steps_.size(); ++s) {
      if (!dropped[s]) plan_.steps_[kept++] = std::move(plan_.steps_[s]);
    }
    plan_.steps_.resize(kept);
  }

  // An input whose bytes are in a step's output, and where.
  struct Part {
    int value;
    size_t offset;
  };

  // The buffer value `v` lies in: itself, or the value it is a view of
  // (placed_in_ always names a buffer of its own, never another view).
  int RootOf(int v) const { return placed_in_[v] >= 0 ? placed_in_[v] : v; }

  // Bytes value `v` takes in its layout.
  size_t StoredBytes(int v) const { return std::max(ByteSize(*types_[v]), native_bytes_[v]); }

  // Where every part is a value some step writes, appears once and fits its
  // place: each becomes a view of `out` (or of what `out` is a view of).
  bool PlacePartsInOutput(const std::vector<Part>& parts, int out) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const int v = parts[i].value;
      const size_t end = i + 1 < parts.size() ? parts[i + 1].offset : StoredBytes(out);
      const auto same = [v](const Part& p) { return p.value == v; };
      if (v < 0 || first_step_[v] < 0 || placed_in_[v] >= 0 || parts[i].offset > end ||
          StoredBytes(v) > end - parts[i].offset ||
          std::count_if(parts.begin(), parts.end(), same) != 1) {
        return false;
      }
    }
    const int root = RootOf(out);
    const size_t base = placed_in_[out] >= 0 ? placed_at_[out] : 0;
    for (const Part& part : parts) {
      placed_in_[part.value] = root;
      placed_at_[part.value] = base + part.offset;
    }
    return true;
  }

  // Where the parts already lie at their offsets in one buffer: `out`
  // becomes a view of it.
  bool ViewOfPlacedParts(const std::vector<Part>& parts, int out) {
    const int first = parts[0].value;
    if (placed_in_[out] >= 0 || first < 0 || placed_in_[first] < 0 ||
        placed_at_[first] < parts[0].offset) {
      return false;
    }
    const int root = placed_in_[first];
    const size_t base = placed_at_[first] - parts[0].offset;
    for (const Part& part : parts) {
      if (part.value < 0 || placed_in_[part.value] != root ||
          placed_at_[part.value] != base + part.offset) {
        return false;
      }
    }
    if (base + StoredBytes(out) > StoredBytes(root)) return false;
    placed_in_[out] = root;
    placed_at_[out] = base;
    return true;
  }

  // The first listing of a value a step computes is written in place;
  // inputs, constants and repeats are copied after the steps.
  absl::Status PlaceOutputs() {
    std::vector<bool> served(graph_.values.size(), false);
    plan_.outputs_written_.assign(plan_.steps_.size(), {});
    for (size_t j = 0; j < graph_.outputs.size(); ++j) {
      const int v = graph_.outputs[j];
      if (!types_[v]) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", graph_.values[v].name, "' is produced by no node"));
      }
      plan_.output_types_.push_back(*types_[v]);
      const bool computed = host_values_[v] == nullptr &&
                            std::find(plan_.input_values_.begin(), plan_.input_values_.end(), v) ==
                                plan_.input_values_.end();
      if (computed && !served[v]) {
        served[v] = true;
        plan_.output_values_.push_back(v);
        for (size_t step = 0; step < plan_.steps_.size(); ++step) {
          const Step& st = plan_.steps_[step];
          const int* written = plan_.arg_values_.data() + st.args_begin + st.num_inputs;
          if (std::find(written, written + st.num_outputs, v) != written + st.num_outputs) {
            plan_.outputs_written_[step].push_back(static_cast<int>(j));
          }
        }
      } else {
        plan_.output_values_.push_back(-1);
        plan_.output_copies_.push_back({v, static_cast<int>(j), ByteSize(*types_[v])});
      }
    }
    return absl::OkStatus();
  }

  // Every intermediate value gets an arena offset; a view (see
  // ViewsInsteadOfCopies) its buffer's plus its place, and the buffer
  // lives as long as all its views.
  absl::Status PlaceIntermediates() {
    std::vector<int> first = first_step_, last = last_step_;
    for (size_t v = 0; v < graph_.values.size(); ++v) {
      const int root = placed_in_[v];
      if (root < 0) continue;
      first[root] = std::min(first[root], first_step_[v]);
      last[root] = std::max(last[root], last_step_[v]);
    }
    std::vector<ArenaRequest> requests;
    std::vector<size_t> offsets(graph_.values.size(), 0);
    std::vector<int> request_values;
    for (size_t v = 0; v < graph_.values.size(); ++v) {
      if (first_step_[v] < 0) continue;
      plan_.unshared_bytes_ += ByteSize(*types_[v]);
      if (placed_in_[v] >= 0) continue;
      requests.push_back({StoredBytes(static_cast<int>(v)), first[v], last[v]});
      request_values.push_back(static_cast<int>(v));
    }
    ArenaLayout layout = PlanArena(requests);
    for (size_t r = 0; r < requests.size(); ++r) offsets[request_values[r]] = layout.offsets[r];
    std::vector<std::pair<int, size_t>> placed;
    for (size_t v = 0; v < graph_.values.size(); ++v) {
      if (first_step_[v] < 0) continue;
      const int root = placed_in_[v];
      placed.emplace_back(static_cast<int>(v),
                          root < 0 ? offsets[v] : offsets[root] + placed_at_[v]);
    }
    plan_.arena_bytes_ = layout.total_bytes;
    plan_.arg_ptrs_.assign(plan_.arg_values_.size(), nullptr);
    if (plan_.shared_arena_ != nullptr) {
      plan_.arena_offsets_ = std::move(placed);  // Counted in the arena with the workspace.
      return absl::OkStatus();
    }
    absl::StatusOr<std::shared_ptr<Buffer>> arena = device_.Allocate(layout.total_bytes);
    if (!arena.ok()) return arena.status();
    plan_.arena_ = *std::move(arena);
    for (const auto& [v, offset] : placed) {
      plan_.value_ptrs_[v] = static_cast<char*>(plan_.arena_->data()) + offset;
    }
    return absl::OkStatus();
  }

  // Kernels run one at a time, so they share one workspace: the largest.
  // With a shared arena it follows the intermediate values there, so that
  // a slot's plans hold one workspace between them, not one each (the
  // default model's blocked convolution layouts: 3 MB a plan at 300 rows).
  // RunSteps points the kernels at it.
  absl::Status PlaceWorkspace() {
    size_t bytes = 0;
    for (const Step& step : plan_.steps_) bytes = std::max(bytes, step.kernel->workspace_bytes());
    plan_.workspace_bytes_ = bytes;
    if (plan_.shared_arena_ != nullptr) {
      constexpr size_t kAlign = 64;  // What oneDNN's blocked layouts want of their buffers.
      plan_.workspace_offset_ = (plan_.arena_bytes_ + kAlign - 1) / kAlign * kAlign;
      plan_.shared_bytes_ = plan_.workspace_offset_ + bytes;
      plan_.shared_arena_->AddPlan(plan_.shared_bytes_);
      plan_.counted_in_arena_ = true;
      return absl::OkStatus();
    }
    if (bytes == 0) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<Buffer>> workspace = device_.Allocate(bytes);
    if (!workspace.ok()) return workspace.status();
    plan_.workspace_ = *std::move(workspace);
    for (Step& step : plan_.steps_) step.kernel->SetWorkspace(plan_.workspace_->data());
    return absl::OkStatus();
  }

  const Graph& graph_;
  const std::map<int, Tensor>& weights_;
  Device& device_;
  ExecutionPlan& plan_;
  std::vector<std::optional<TensorType>> types_;
  // Host values known now (initializers, constants, folded values), for shape rules.
  std::vector<const Tensor*> host_values_;
  // First and last step that touch each intermediate value, for the arena.
  std::vector<int> first_step_, last_step_;
  std::vector<bool> is_output_;
  std::vector<std::vector<const Node*>> readers_;
  // Per value: the backend's layout when its producer kept one (else empty)
  // and the bytes that layout needs.
  std::vector<std::string> layouts_;
  std::vector<size_t> native_bytes_;
  // Per value: the value whose buffer it is a view of (-1: none) and its
  // byte offset there (ViewsInsteadOfCopies).
  std::vector<int> placed_in_;
  std::vector<size_t> placed_at_;
};

absl::StatusOr<std::unique_ptr<ExecutionPlan>> ExecutionPlan::Create(
    const Graph& graph, const std::map<int, Tensor>& weights, Device& device,
    const std::vector<Shape>& input_shapes, std::shared_ptr<SharedPlanArena> shared_arena) {
  std::unique_ptr<ExecutionPlan> plan(new ExecutionPlan());
  plan->device_ = &device;
  plan->shared_arena_ = std::move(shared_arena);
  Builder builder(graph, weights, device, plan.get());
  // Kernels are built and constants folded with the host's allocator too:
  // running out of memory there is the caller's ResourceExhausted, not an
  // abort of the process.
  try {
    REPLICAD_RETURN_IF_ERROR(builder.Build(input_shapes));
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

absl::Status ExecutionPlan::Run(const void* const* inputs, void* const* outputs) {
  return RunSteps(RunContext{}, inputs, outputs, steps_.size(), nullptr, nullptr);
}

absl::Status ExecutionPlan::Run(const void* const* inputs, void* const* outputs, Proceed proceed) {
  return RunSteps(RunContext{}, inputs, outputs, steps_.size(), nullptr, nullptr, &proceed);
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
    if (!status.ok()) return NodeError(*step.node, status);
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

}  // namespace replicad
