#include "core/model/row_mixing.h"

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/attention_attributes.h"
#include "core/ops/op_registry.h"

namespace replicad {
namespace {

constexpr int kNoRows = -1;

// What one node does to the batch: why it mixes rows ("" when it does not)
// and where the batch lies in its outputs.
struct Effect {
  std::string mixes;
  int axis = 0;
};

// Follows the batch dim (dim 0 of every graph input) through the graph: for
// each value, the dim that holds the request's rows, or kNoRows for values
// computed without them (weights, shapes).
class Analysis {
 public:
  explicit Analysis(const Graph& graph) : graph_(graph), axis_(graph.values.size(), kNoRows) {
    for (int v : graph.inputs) axis_[v] = graph.values[v].type.shape.empty() ? kNoRows : 0;
  }

  std::string Run() {
    for (const Node& node : graph_.nodes) {
      int batch = kNoRows;
      for (int v : node.inputs) {
        if (v >= 0 && axis_[v] != kNoRows) {
          batch = axis_[v];
          break;
        }
      }
      if (batch == kNoRows) continue;
      // Shape and Size read only a value's type.
      if (node.op_type == "Shape" || node.op_type == "Size") continue;
      // A shape, count or choice read from the rows' values (Reshape's shape,
      // TopK's K, an If's condition computed from the request) is one for the
      // whole batch.
      if (const OpDefinition* op = FindOp(node.op_type); op != nullptr && node.op_type != "If") {
        for (size_t i = 0; i < node.inputs.size(); ++i) {
          if (op->NeedsValue(i) && node.inputs[i] >= 0 && axis_[node.inputs[i]] != kNoRows) {
            return absl::StrCat(node.op_type, " node '", node.name, "' (input ", i,
                                ", which sets the output's shape, is computed from the rows)");
          }
        }
      }
      const Effect effect = Apply(node, batch);
      if (!effect.mixes.empty()) {
        return absl::StrCat(node.op_type, " node '", node.name, "' (", effect.mixes, ")");
      }
      for (int v : node.outputs) {
        if (v >= 0) axis_[v] = effect.axis;
      }
    }
    for (int v : graph_.outputs) {
      if (axis_[v] > 0) {
        return absl::StrCat("output '", graph_.values[v].name, "' (holds the batch in dim ",
                            axis_[v], ")");
      }
    }
    return "";
  }

 private:
  using Rule = std::function<Effect(const Analysis&, const Node&, int)>;

  Effect Apply(const Node& node, int batch) const {
    static const std::map<std::string, Rule>* const kRules = new std::map<std::string, Rule>{
        {"ArgMax", &Analysis::AlongAxis},
        {"ArgMin", &Analysis::AlongAxis},
        {"Concat", &Analysis::AlongAxis},
        {"Split", &Analysis::AlongAxis},
        {"TopK", &Analysis::AlongAxis},
        {"GatherElements", &Analysis::AlongAxis},
        {"CumSum", &Analysis::AlongAxis},
        {"Softmax", &Analysis::Normalizing},
        {"LogSoftmax", &Analysis::Normalizing},
        {"Hardmax", &Analysis::Normalizing},
        {"LayerNormalization", &Analysis::LayerNorm},
        {"Gather", &Analysis::GatherRule},
        {"GatherND", &Analysis::GatherNdRule},
        {"ScatterND", &Analysis::ScatterRule},
        {"Transpose", &Analysis::TransposeRule},
        {"Flatten", &Analysis::FlattenRule},
        {"Squeeze", &Analysis::SqueezeRule},
        {"Unsqueeze", &Analysis::SqueezeRule},
        {"Slice", &Analysis::SliceRule},
        {"Gemm", &Analysis::GemmRule},
        {"replicad.Attention", &Analysis::AttentionRule},
        {"Einsum", &Analysis::EinsumRule},
        {"OneHot", &Analysis::OneHotRule},
        {"Trilu", &Analysis::TriluRule},
        // Each roi reads the image its batch index names.
        {"RoiAlign",
         [](const Analysis& a, const Node& n, int b) {
           return Effect{a.Rows(n, 0) ? "reads the images its batch_indices name" : "", b};
         }},
        // One scale and zero point for the whole tensor, from every row's values.
        {"DynamicQuantizeLinear",
         [](const Analysis& a, const Node& n, int b) {
           return Effect{a.Rows(n, 0) ? "its scale and zero point come from every row" : "", b};
         }},
        // One branch for the whole batch, whichever rows decide it.
        {"If",
         [](const Analysis&, const Node&, int b) {
           return Effect{"one branch for the whole batch", b};
         }},
    };
    if (node.op_type.rfind("Reduce", 0) == 0) return ReduceRule(node, batch);
    auto it = kRules->find(node.op_type);
    return it == kRules->end() ? Effect{"", batch} : it->second(*this, node, batch);
  }

  int Rank(int v) const {
    if (v < 0) return -1;
    const Shape& shape = graph_.values[v].type.shape;
    return shape.empty() ? -1 : static_cast<int>(shape.size());
  }
  int InputRank(const Node& node, size_t i) const {
    return i < node.inputs.size() ? Rank(node.inputs[i]) : -1;
  }
  bool Rows(const Node& node, size_t i) const {
    return i < node.inputs.size() && node.inputs[i] >= 0 && axis_[node.inputs[i]] != kNoRows;
  }
  int64_t Int(const Node& node, const char* name, int64_t fallback) const {
    return node.attributes.GetInt(name, fallback).value_or(fallback);
  }
  std::vector<int64_t> Ints(const Node& node, const char* name) const {
    return node.attributes.GetInts(name, {}).value_or(std::vector<int64_t>{});
  }
  // Input `i`'s int64 values when it is an initializer, else empty.
  std::vector<int64_t> ConstantInts(const Node& node, size_t i) const {
    if (i >= node.inputs.size() || node.inputs[i] < 0) return {};
    auto it = graph_.initializers.find(node.inputs[i]);
    if (it == graph_.initializers.end() || it->second.dtype() != DType::kInt64) return {};
    const Tensor& t = it->second;
    return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
  }
  // Whether `axis` as stated names dim `batch` of a value of `rank` (-1:
  // unknown; then a negative axis is taken as some dim after the batch's).
  static bool Names(int64_t axis, int batch, int rank) {
    if (axis >= 0) return axis == batch;
    return rank > 0 && axis + rank == batch;
  }

  // ArgMax, Concat, Split, TopK, GatherElements, CumSum: one axis, which must
  // not be the batch's (ArgMax drops it without keepdims).
  Effect AlongAxis(const Node& node, int batch) const {
    const std::string& op = node.op_type;
    int64_t axis = Int(node, "axis", op == "TopK" ? -1 : 0);
    if (op == "CumSum") {
      const std::vector<int64_t> given = ConstantInts(node, 1);
      if (given.empty()) return {"along an axis computed at run time", batch};
      axis = given[0];
    }
    const int rank = InputRank(node, 0);
    if (!Rows(node, 0) && op != "Concat") return {"", batch};
    if (Names(axis, batch, rank)) return {"along the batch dim", batch};
    const bool drops = (op == "ArgMax" || op == "ArgMin") && Int(node, "keepdims", 1) == 0;
    const int64_t normalized = axis < 0 && rank > 0 ? axis + rank : axis;
    return {"", drops && normalized >= 0 && normalized < batch ? batch - 1 : batch};
  }

  // Softmax and its kin: along `axis` from opset 13; before it, over every
  // dim from `axis` on (the input seen as 2-D).
  Effect Normalizing(const Node& node, int batch) const {
    const bool coerced = graph_.opset < 13;
    const int64_t axis = Int(node, "axis", coerced ? 1 : -1);
    const int rank = InputRank(node, 0);
    if (coerced) {
      const int64_t start = axis < 0 && rank > 0 ? axis + rank : axis;
      return {start <= batch ? "over the batch dim" : "", batch};
    }
    return {Names(axis, batch, rank) ? "along the batch dim" : "", batch};
  }

  Effect LayerNorm(const Node& node, int batch) const {
    const int64_t axis = Int(node, "axis", -1);
    const int rank = InputRank(node, 0);
    const bool covers =
        axis >= 0 ? axis <= batch : rank > 0 && axis + rank <= batch;  // Normalized dims.
    return {covers ? "normalizes over the batch dim" : "", batch};
  }

  Effect GatherRule(const Node& node, int batch) const {
    const int64_t axis = Int(node, "axis", 0);
    const int rank = InputRank(node, 0);
    const int64_t normalized = axis < 0 && rank > 0 ? axis + rank : axis;
    if (Rows(node, 0)) {
      if (Names(axis, batch, rank)) return {"indexes rows", batch};
      const int indices_rank = std::max(InputRank(node, 1), 0);
      return {"", normalized < batch ? batch - 1 + indices_rank : batch};
    }
    // The indices carry the rows (an embedding lookup): they replace `axis`.
    return {"", static_cast<int>(normalized) + batch};
  }

  Effect GatherNdRule(const Node& node, int batch) const {
    if (!Rows(node, 0)) return {"", batch};
    return {Int(node, "batch_dims", 0) <= batch ? "indexes rows" : "", batch};
  }

  Effect ScatterRule(const Node& node, int batch) const {
    return {Rows(node, 0) ? "writes at indexed rows" : "", batch};
  }

  Effect TransposeRule(const Node& node, int batch) const {
    std::vector<int64_t> perm = Ints(node, "perm");
    if (perm.empty()) {
      const int rank = InputRank(node, 0);
      if (rank < 0) return {"reverses dims of unknown rank", batch};
      for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
    }
    auto it = std::find(perm.begin(), perm.end(), batch);
    if (it == perm.end()) return {"a perm without the batch dim", batch};
    return {"", static_cast<int>(it - perm.begin())};
  }

  Effect FlattenRule(const Node& node, int batch) const {
    const int64_t axis = Int(node, "axis", 1);
    if (axis == 0) return {"flattens the batch dim", batch};
    const int rank = InputRank(node, 0);
    const int64_t normalized = axis < 0 && rank > 0 ? axis + rank : axis;
    return {"", batch < normalized ? 0 : 1};
  }

  Effect SqueezeRule(const Node& node, int batch) const {
    std::vector<int64_t> axes = Ints(node, "axes");
    if (axes.empty()) axes = ConstantInts(node, 1);
    const bool unsqueeze = node.op_type == "Unsqueeze";
    const int in_rank = InputRank(node, 0);
    const int out_rank = in_rank < 0 ? -1 : in_rank + (unsqueeze ? int(axes.size()) : 0);
    std::vector<int64_t> normalized;
    for (int64_t a : axes) {
      const int rank = unsqueeze ? out_rank : in_rank;
      if (a < 0 && rank < 0) continue;  // Taken as after the batch.
      normalized.push_back(a < 0 ? a + rank : a);
    }
    std::sort(normalized.begin(), normalized.end());
    int out = batch;
    for (int64_t a : normalized) {
      if (unsqueeze && a <= out) ++out;
      if (!unsqueeze && a == batch) return {"squeezes the batch dim", batch};
      if (!unsqueeze && a < batch) --out;
    }
    return {"", out};
  }

  // A Slice along the batch dim cuts rows unless it takes them all (start
  // 0, end past any size, step 1).
  Effect SliceRule(const Node& node, int batch) const {
    if (!Rows(node, 0)) return {"", batch};
    const bool attributes = node.attributes.Has("starts");  // Opset < 10.
    auto ints = [&](const char* name, size_t input) {
      return attributes ? Ints(node, name) : ConstantInts(node, input);
    };
    const std::vector<int64_t> starts = ints("starts", 1), ends = ints("ends", 2);
    std::vector<int64_t> axes = ints("axes", 3);
    const std::vector<int64_t> steps = attributes ? std::vector<int64_t>{} : ConstantInts(node, 4);
    const bool axes_given =
        attributes ? node.attributes.Has("axes") : node.inputs.size() > 3 && node.inputs[3] >= 0;
    if (axes_given && axes.empty()) return {"over axes computed at run time", batch};
    if (!axes_given) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    const int rank = InputRank(node, 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      if (!Names(axes[i], batch, rank)) continue;
      const bool whole = i < starts.size() && i < ends.size() && starts[i] == 0 &&
                         ends[i] >= (int64_t{1} << 31) - 1 && (i >= steps.size() || steps[i] == 1);
      if (!whole) return {"cuts rows", batch};
    }
    return {"", batch};
  }

  Effect GemmRule(const Node& node, int batch) const {
    if (Rows(node, 1) || (Rows(node, 0) && Int(node, "transA", 0) != 0)) {
      return {"contracts rows", batch};
    }
    return {"", batch};
  }

  // The fused attention (attention_attributes.h) contracts Q's last dim,
  // both of Kt's and V's rows, and normalizes along Kt's last: rows of the
  // batch in any of those are mixed; in the batch dims or Q's rows they are
  // not. Inputs and the output may be read and written through perms.
  Effect AttentionRule(const Node& node, int batch) const {
    for (size_t i = 0; i < 3; ++i) {
      const int rank = InputRank(node, i);
      if (!Rows(node, i) || rank < 2) continue;
      const int axis = Permuted(Ints(node, kAttentionPerms[i]), axis_[node.inputs[i]]);
      if (axis >= (i == 0 ? rank - 1 : rank - 2)) {
        return {"attends across the batch's rows", batch};
      }
      if (i == 0) batch = axis;
    }
    const std::vector<int64_t> out = Ints(node, kAttentionPerms[3]);
    return {"", Permuted(out, batch)};
  }
  // Where dim `axis` of a tensor lands once transposed by `perm` (empty: stays).
  static int Permuted(const std::vector<int64_t>& perm, int axis) {
    for (size_t j = 0; j < perm.size(); ++j) {
      if (perm[j] == axis) return static_cast<int>(j);
    }
    return axis;
  }

  // Each operand that carries rows names its batch dim with a label the
  // output keeps: "bij,bjk->bik".
  Effect EinsumRule(const Node& node, int batch) const {
    const std::string equation = node.attributes.GetString("equation", "").value_or(std::string());
    const size_t arrow = equation.find("->");
    if (arrow == std::string::npos) return {"an equation without an output", batch};
    std::string output;
    for (char c : equation.substr(arrow + 2)) {
      if (c != ' ') output += c;
    }
    std::vector<std::string> terms(1);
    for (char c : equation.substr(0, arrow)) {
      if (c == ',') {
        terms.emplace_back();
      } else if (c != ' ') {
        terms.back() += c;
      }
    }
    int out = -1;
    for (size_t i = 0; i < terms.size() && i < node.inputs.size(); ++i) {
      if (!Rows(node, i)) continue;
      const int b = axis_[node.inputs[i]];
      const std::string& term = terms[i];
      if (term.rfind("...", 0) == 0) {
        if (b != 0 || output.rfind("...", 0) != 0) return {"along the batch dim", batch};
        out = 0;
        continue;
      }
      if (b >= static_cast<int>(term.size())) return {"along the batch dim", batch};
      const size_t at = output.find(term[b]);
      if (at == std::string::npos || (out >= 0 && out != static_cast<int>(at))) {
        return {"along the batch dim", batch};
      }
      out = static_cast<int>(at);
    }
    return {"", out < 0 ? batch : out};
  }

  Effect OneHotRule(const Node& node, int batch) const {
    const int64_t axis = Int(node, "axis", -1);
    const int rank = InputRank(node, 0);
    const int64_t normalized = axis < 0 ? (rank < 0 ? -1 : axis + rank + 1) : axis;
    return {"", normalized >= 0 && normalized <= batch ? batch + 1 : batch};
  }

  Effect TriluRule(const Node& node, int batch) const {
    const int rank = InputRank(node, 0);
    return {rank > 0 && batch >= rank - 2 ? "masks by the row's index" : "", batch};
  }

  Effect ReduceRule(const Node& node, int batch) const {
    std::vector<int64_t> axes = Ints(node, "axes");
    if (axes.empty()) axes = ConstantInts(node, 1);
    const bool noop = Int(node, "noop_with_empty_axes", 0) != 0;
    const bool axes_given = !axes.empty() || (node.inputs.size() > 1 && node.inputs[1] >= 0);
    if (!axes_given) return {noop ? "" : "over every dim, the batch's too", batch};
    if (axes.empty()) return {"over axes computed at run time", batch};
    const int rank = InputRank(node, 0);
    int out = batch;
    for (int64_t axis : axes) {
      if (Names(axis, batch, rank)) return {"over the batch dim", batch};
      const int64_t normalized = axis < 0 && rank > 0 ? axis + rank : axis;
      if (Int(node, "keepdims", 1) == 0 && normalized >= 0 && normalized < batch) --out;
    }
    return {"", out};
  }

  const Graph& graph_;
  std::vector<int> axis_;  // Per value: the dim holding the request's rows, or kNoRows.
};

}  // namespace

std::string RowMixingNode(const Graph& graph) { return Analysis(graph).Run(); }

}  // namespace replicad
