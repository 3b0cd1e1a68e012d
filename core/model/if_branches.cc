#include "core/model/if_branches.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

std::string NodeName(const onnx::NodeProto& node, int n) {
  return node.name().empty() ? absl::StrCat(node.op_type(), "_", n) : node.name();
}

bool IsIf(const onnx::NodeProto& node) {
  return node.op_type() == "If" && (node.domain().empty() || node.domain() == "ai.onnx");
}

// Appends `condition`/`branch` to the node's guards (after any it has).
void AddGuard(onnx::NodeProto* node, const std::string& condition, bool branch) {
  onnx::AttributeProto* conditions = nullptr;
  onnx::AttributeProto* branches = nullptr;
  for (onnx::AttributeProto& a : *node->mutable_attribute()) {
    if (a.name() == kGuardConditions) conditions = &a;
    if (a.name() == kGuardBranches) branches = &a;
  }
  if (conditions == nullptr) {
    conditions = node->add_attribute();
    conditions->set_name(kGuardConditions);
    conditions->set_type(onnx::AttributeProto::STRINGS);
    branches = node->add_attribute();
    branches->set_name(kGuardBranches);
    branches->set_type(onnx::AttributeProto::INTS);
  }
  conditions->add_strings(condition);
  branches->add_ints(branch ? 1 : 0);
}

// Moves the nodes of `branch` (already flat) onto `out`, renamed and
// guarded; returns the names of the branch's outputs as the graph sees them.
std::vector<std::string> MoveBranch(onnx::GraphProto* branch, const std::string& prefix,
                                    const std::string& condition, bool taken,
                                    google::protobuf::RepeatedPtrField<onnx::NodeProto>* out) {
  std::map<std::string, std::string> renamed;
  const auto outer_or_renamed = [&renamed](const std::string& name) {
    auto it = renamed.find(name);
    return it == renamed.end() ? name : it->second;
  };
  for (onnx::NodeProto& node : *branch->mutable_node()) {
    for (std::string& input : *node.mutable_input()) {
      if (!input.empty()) input = outer_or_renamed(input);
    }
    for (std::string& output : *node.mutable_output()) {
      if (output.empty()) continue;
      const std::string name = absl::StrCat(prefix, output);
      renamed[output] = name;
      output = name;
    }
    if (!node.name().empty()) node.set_name(absl::StrCat(prefix, node.name()));
    AddGuard(&node, condition, taken);
    out->Add()->Swap(&node);
  }
  std::vector<std::string> outputs;
  for (const onnx::ValueInfoProto& output : branch->output()) {
    outputs.push_back(outer_or_renamed(output.name()));
  }
  return outputs;
}

}  // namespace

absl::Status FlattenIfBranches(onnx::GraphProto* graph) {
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  nodes.Swap(graph->mutable_node());
  for (int n = 0; n < nodes.size(); ++n) {
    onnx::NodeProto& node = nodes[n];
    if (!IsIf(node)) {
      graph->add_node()->Swap(&node);
      continue;
    }
    const std::string name = NodeName(node, n);
    if (node.input_size() != 1 || node.input(0).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", name, "' (If): expected 1 input 'cond', received ", node.input_size()));
    }
    onnx::GraphProto then_branch, else_branch;
    bool has_then = false, has_else = false;
    for (onnx::AttributeProto& a : *node.mutable_attribute()) {
      if (a.name() == "then_branch" && a.has_g()) {
        then_branch.Swap(a.mutable_g());
        has_then = true;
      } else if (a.name() == "else_branch" && a.has_g()) {
        else_branch.Swap(a.mutable_g());
        has_else = true;
      }
    }
    if (!has_then || !has_else) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", name, "' (If): expected graph attributes then_branch and else_branch"));
    }
    const std::string condition = node.input(0);
    std::vector<std::string> inputs = {condition};
    for (auto [branch, taken] : {std::pair{&then_branch, true}, std::pair{&else_branch, false}}) {
      if (branch->initializer_size() > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", name, "' (If): a ", taken ? "then" : "else",
                         "_branch with initializers (replicad reads Constant nodes there)"));
      }
      if (branch->output_size() != node.output_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", name, "' (If): ", taken ? "then" : "else", "_branch has ",
                         branch->output_size(), " outputs; the If has ", node.output_size()));
      }
      REPLICAD_RETURN_IF_ERROR(FlattenIfBranches(branch));
      const std::string prefix = absl::StrCat(name, taken ? "/then/" : "/else/");
      for (std::string& output :
           MoveBranch(branch, prefix, condition, taken, graph->mutable_node())) {
        inputs.push_back(std::move(output));
      }
    }
    node.clear_input();
    for (const std::string& input : inputs) node.add_input(input);
    node.clear_attribute();
    graph->add_node()->Swap(&node);
  }
  return absl::OkStatus();
}

}  // namespace replicad
