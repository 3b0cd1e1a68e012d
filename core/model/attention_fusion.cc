#include "core/model/attention_fusion.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/model/graph_rewrite.h"
#include "core/ops/attention_attributes.h"
#include "core/ops/fused_activation.h"

namespace replicad {
namespace {

constexpr int kMaxSteps = 4;

int Rank(const Graph& graph, int v) { return static_cast<int>(graph.values[v].type.shape.size()); }

// A Softmax over the last axis only: ONNX's from opset 13 with axis -1 (or
// the last one of a known rank); before 13 the input is coerced to 2-D at
// `axis` (default 1), which is the last axis only when it is rank - 1.
bool SoftmaxOverLastAxis(const Graph& graph, const Node& node) {
  if (node.inputs.size() != 1 || node.outputs.size() != 1 || node.inputs[0] < 0) return false;
  const int rank = Rank(graph, node.inputs[0]);
  const int64_t axis = node.attributes.GetInt("axis", graph.opset >= 13 ? -1 : 1).value_or(0);
  if (graph.opset >= 13 && axis == -1) return true;
  return rank >= 2 && (axis == rank - 1 || axis == -1);
}

// A plain MatMul: two inputs, nothing fused into it.
bool PlainMatMul(const Node& node) {
  return node.op_type == "MatMul" && node.inputs.size() == 2 && node.outputs.size() == 1 &&
         node.inputs[0] >= 0 && node.inputs[1] >= 0 && !HasFusedBias(node.attributes) &&
         !node.attributes.Has(kFusedActivation);
}

// Whether what the graph knows of `v` allows it as Q, Kt, V or S: a float32
// value that is not known to be a vector. (Exporters' Reshapes often leave
// shape inference without a rank; the op's shape rule checks it in every
// plan, and attention never multiplies vectors.)
bool MaybeMatrix(const Graph& graph, int v) {
  return v >= 0 && Rank(graph, v) != 1 && graph.values[v].type.dtype == DType::kFloat32;
}

struct Match {
  int qk = -1;                       // The MatMul of Q and Kt.
  std::vector<int> nodes;            // The Softmax, then the steps' nodes, back to front.
  std::vector<AttentionStep> steps;  // Back to front; operands as graph values.
};

// The ways `node` may be a step on S: the step (operands as graph values)
// and the input S would be. Mul and Add may hold S on either side.
std::vector<std::pair<AttentionStep, int>> Readings(const Node& node) {
  using Kind = AttentionStep::Kind;
  std::vector<std::pair<AttentionStep, int>> readings;
  const std::vector<int>& in = node.inputs;
  if (node.outputs.size() != 1 || std::count(in.begin(), in.end(), -1) > 0) return readings;
  const bool distinct = std::set<int>(in.begin(), in.end()).size() == in.size();
  if (!distinct) return readings;
  if ((node.op_type == "Mul" || node.op_type == "Add") && in.size() == 2) {
    const Kind kind = node.op_type == "Mul" ? Kind::kMul : Kind::kAdd;
    readings.push_back({AttentionStep{kind, in[1], -1}, in[0]});
    readings.push_back({AttentionStep{kind, in[0], -1}, in[1]});
  } else if (node.op_type == "Div" && in.size() == 2) {
    readings.push_back({AttentionStep{Kind::kDiv, in[1], -1}, in[0]});
  } else if (node.op_type == "Where" && in.size() == 3) {
    readings.push_back({AttentionStep{Kind::kFillWhere, in[1], in[0]}, in[2]});
    readings.push_back({AttentionStep{Kind::kFillUnless, in[2], in[0]}, in[1]});
  }
  return readings;
}

// Walks back from S (value `s`) through at most `steps_left` steps to the
// MatMul that made the scores, trying each reading of a step in turn.
bool Walk(const Graph& graph, const std::vector<std::vector<int>>& readers,
          const std::vector<int>& producers, int s, int steps_left, Match* match) {
  if (s < 0 || producers[s] < 0 || !PrivateValue(graph, readers, s)) return false;
  const int p = producers[s];
  const Node& node = graph.nodes[p];
  if (PlainMatMul(node)) {
    match->qk = p;
    return true;
  }
  if (steps_left == 0) return false;
  for (const auto& [step, from] : Readings(node)) {
    Match deeper = *match;
    deeper.nodes.push_back(p);
    deeper.steps.push_back(step);
    if (Walk(graph, readers, producers, from, steps_left - 1, &deeper)) {
      *match = std::move(deeper);
      return true;
    }
  }
  return false;
}

bool SameGuards(const Node& a, const Node& b) {
  if (a.guards.size() != b.guards.size()) return false;
  for (size_t i = 0; i < a.guards.size(); ++i) {
    if (a.guards[i].condition != b.guards[i].condition ||
        a.guards[i].branch != b.guards[i].branch) {
      return false;
    }
  }
  return true;
}

// The fused node for `match`, reading V (`v`) and writing what the MatMul
// `pv` wrote; nullopt where a shape does not allow it.
std::optional<Node> FusedNode(const Graph& graph, const Match& match, const Node& softmax,
                              const Node& pv) {
  const Node& qk = graph.nodes[match.qk];
  const int v = pv.inputs[1];
  if (!MaybeMatrix(graph, qk.inputs[0]) || !MaybeMatrix(graph, qk.inputs[1]) ||
      !MaybeMatrix(graph, v) || !MaybeMatrix(graph, qk.outputs[0]) || !SameGuards(qk, pv)) {
    return std::nullopt;
  }
  for (int n : match.nodes) {  // The Softmax and the steps.
    if (!SameGuards(graph.nodes[n], pv)) return std::nullopt;
  }
  Node fused;
  fused.name = softmax.name;
  fused.op_type = std::string(kAttention);
  fused.inputs = {qk.inputs[0], qk.inputs[1], v};
  fused.outputs = pv.outputs;
  fused.guards = pv.guards;
  std::vector<AttentionStep> steps(match.steps.rbegin(), match.steps.rend());
  // Each operand and condition becomes an input of the fused node; the
  // steps then name it by its index there.
  auto take = [&](int* value) {
    fused.inputs.push_back(*value);
    *value = static_cast<int>(fused.inputs.size()) - 1;
  };
  for (AttentionStep& step : steps) {
    take(&step.operand);
    if (step.condition >= 0) take(&step.condition);
  }
  WriteAttentionSteps(steps, &fused.attributes);
  return fused;
}

// The perm of a Transpose node, when it names one explicitly.
std::vector<int64_t> PermOf(const Node& transpose) {
  return transpose.attributes.GetInts("perm", {}).value_or(std::vector<int64_t>{});
}

// Reads Q, Kt and V through the Transposes that made them, and writes the
// output through the Transpose that reads it, where only the fused node
// sees what they carry and the perm leaves a unit stride in each matrix
// (see kAttentionPerms): the transposed copies are then never made.
void AbsorbTransposes(const Graph& graph, const std::vector<std::vector<int>>& readers,
                      const std::vector<int>& producers, Node* fused, std::set<int>* dead) {
  for (int i = 0; i < 3; ++i) {
    const int v = fused->inputs[i];
    const int p = producers[v];
    if (p < 0 || !PrivateValue(graph, readers, v) || dead->count(p)) continue;
    const Node& transpose = graph.nodes[p];
    const std::vector<int64_t> perm = PermOf(transpose);
    const int64_t rank = static_cast<int64_t>(perm.size());
    if (transpose.op_type != "Transpose" || transpose.inputs.size() != 1 || rank < 2 ||
        (perm[rank - 1] != rank - 1 && perm[rank - 2] != rank - 1) ||
        !SameGuards(transpose, *fused)) {
      continue;
    }
    fused->inputs[i] = transpose.inputs[0];
    fused->attributes.Set(kAttentionPerms[i], perm);
    dead->insert(p);
  }
  const int t = ReaderOf(graph, readers, fused->outputs[0], "Transpose", 1);
  if (t < 0 || dead->count(t)) return;
  const Node& transpose = graph.nodes[t];
  const std::vector<int64_t> perm = PermOf(transpose);
  const int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 2 || perm[rank - 1] != rank - 1 || !SameGuards(transpose, *fused)) return;
  fused->outputs = transpose.outputs;
  fused->attributes.Set(kAttentionPerms[3], perm);
  dead->insert(t);
}

}  // namespace

void FuseAttention(Graph* graph) {
  const std::vector<std::vector<int>> readers = Readers(*graph);
  const std::vector<int> producers = Producers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    const Node& softmax = graph->nodes[n];
    if (softmax.op_type != "Softmax" || !SoftmaxOverLastAxis(*graph, softmax)) continue;
    const int p = softmax.outputs[0];
    const int pv = ReaderOf(*graph, readers, p, "MatMul", 1);
    if (pv < 0 || !PlainMatMul(graph->nodes[pv]) || graph->nodes[pv].inputs[0] != p ||
        graph->nodes[pv].inputs[1] == p) {
      continue;
    }
    Match match;
    match.nodes.push_back(static_cast<int>(n));
    if (!Walk(*graph, readers, producers, softmax.inputs[0], kMaxSteps, &match)) continue;
    if (dead.count(match.qk) || dead.count(pv)) continue;
    std::optional<Node> fused = FusedNode(*graph, match, softmax, graph->nodes[pv]);
    if (!fused.has_value()) continue;
    dead.insert(match.nodes.begin(), match.nodes.end());
    dead.insert(match.qk);
    AbsorbTransposes(*graph, readers, producers, &*fused, &dead);
    graph->nodes[pv] = *std::move(fused);
  }
  RemoveNodes(graph, dead);
}

}  // namespace replicad
