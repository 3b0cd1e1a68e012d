#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/model/arena_planner.h"
#include "core/model/plan_builder.h"

namespace replicad {

std::vector<bool> ExecutionPlan::Builder::ViewsInsteadOfCopies() {
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

void ExecutionPlan::Builder::OutputsOverDeadInputs(const std::vector<bool>& dropped) {
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
    if (dropped[s] || i < 0 || static_cast<size_t>(i) >= step.num_inputs || step.num_outputs < 1) {
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

void ExecutionPlan::Builder::DropSteps(const std::vector<bool>& dropped) {
  size_t kept = 0;
  for (size_t s = 0; s < plan_.steps_.size(); ++s) {
    if (!dropped[s]) plan_.steps_[kept++] = std::move(plan_.steps_[s]);
  }
  plan_.steps_.resize(kept);
}

bool ExecutionPlan::Builder::PlacePartsInOutput(const std::vector<Part>& parts, int out) {
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

bool ExecutionPlan::Builder::ViewOfPlacedParts(const std::vector<Part>& parts, int out) {
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

absl::Status ExecutionPlan::Builder::PlaceOutputs() {
  std::vector<bool> served(graph_.values.size(), false);
  plan_.outputs_written_.assign(plan_.steps_.size(), {});
  for (size_t j = 0; j < graph_.outputs.size(); ++j) {
    const int v = graph_.outputs[j];
    if (plan_.part_ != nullptr) {
      // Handed over from the host after the part (RunToHost); the part's
      // own outputs have the shapes each request gives them.
      plan_.output_types_.push_back(in_part_[v] ? graph_.values[v].type : *types_[v]);
      plan_.output_values_.push_back(-1);
      plan_.graph_outputs_.push_back(v);
      continue;
    }
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

absl::Status ExecutionPlan::Builder::PlaceIntermediates() {
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
    placed.emplace_back(static_cast<int>(v), root < 0 ? offsets[v] : offsets[root] + placed_at_[v]);
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

absl::Status ExecutionPlan::Builder::PlaceWorkspace() {
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

}  // namespace replicad
