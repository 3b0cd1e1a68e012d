#include "core/model/graph_optimizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/model/attention_fusion.h"
#include "core/model/graph_rewrite.h"
#include "core/model/qdq_fusion.h"
#include "core/ops/constant_value.h"
#include "core/ops/fused_activation.h"

namespace replicad {
namespace {

// A Constant node's value becomes an initializer, so the rewrites below see
// it as known (e.g. the 0 and 6 of an exported ReLU6's Clip).
void ConstantsToInitializers(Graph* graph) {
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    const Node& node = graph->nodes[n];
    if (node.op_type != "Constant" || node.outputs.size() != 1) continue;
    KernelSpec spec;
    spec.op_type = node.op_type;
    spec.node_name = node.name;
    spec.opset = graph->opset;
    spec.attributes = &node.attributes;
    absl::StatusOr<Tensor> value = ConstantValue(spec);
    if (!value.ok()) continue;  // The plan reports it, naming the node.
    graph->initializers[node.outputs[0]] = *std::move(value);
    graph->values[node.outputs[0]].type = graph->initializers[node.outputs[0]].type();
    dead.insert(static_cast<int>(n));
  }
  RemoveNodes(graph, dead);
}

// A Pad whose pads are all known zeros (exporters write one before an
// AveragePool) copies its input, whatever its mode.
bool PadsNothing(const Graph& graph, const Node& node) {
  if (node.op_type != "Pad" || node.outputs.size() != 1) return false;
  if (graph.opset < 11) {
    absl::StatusOr<std::vector<int64_t>> pads = node.attributes.GetInts("pads", {});
    return pads.ok() && !pads->empty() &&
           std::all_of(pads->begin(), pads->end(), [](int64_t p) { return p == 0; });
  }
  if (node.inputs.size() < 2 || node.inputs[1] < 0) return false;
  const Tensor* pads = Initializer(graph, node.inputs[1]);
  if (pads == nullptr || pads->dtype() != DType::kInt64) return false;
  return std::all_of(pads->data<int64_t>(), pads->data<int64_t>() + pads->num_elements(),
                     [](int64_t p) { return p == 0; });
}

// Identity, Dropout whose mask nobody reads and a Pad of nothing pass their
// input through.
void RemovePassThroughs(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    const Node& node = graph->nodes[n];
    const bool dropout_without_mask =
        node.op_type == "Dropout" &&
        (node.outputs.size() < 2 || readers[node.outputs[1]].empty()) &&
        !(node.outputs.size() >= 2 && IsGraphOutput(*graph, node.outputs[1]));
    // Dropout's training_mode input, when given, must be a known false.
    bool inference = true;
    if (node.op_type == "Dropout" && node.inputs.size() >= 3 && node.inputs[2] >= 0) {
      const Tensor* mode = Initializer(*graph, node.inputs[2]);
      inference = mode != nullptr && mode->num_elements() == 1 && AllZero(*mode);
    }
    if (!(node.op_type == "Identity" || (dropout_without_mask && inference) ||
          PadsNothing(*graph, node))) {
      continue;
    }
    const int in = node.inputs[0], out = node.outputs[0];
    if (in < 0 || IsGraphOutput(*graph, out)) continue;
    for (int reader : readers[out]) {
      for (int& v : graph->nodes[reader].inputs) {
        if (v == out) v = in;
      }
    }
    dead.insert(static_cast<int>(n));
  }
  RemoveNodes(graph, dead);
}

// A BatchNormalization's scale, shift, mean and variance into `params` when
// all four are float32 initializers of `channels` elements.
bool ConstantBatchNormParams(const Graph& graph, const Node& bn, int64_t channels,
                             const Tensor* params[4]) {
  for (int p = 0; p < 4; ++p) {
    params[p] = Initializer(graph, bn.inputs[p + 1]);
    if (params[p] == nullptr || params[p]->dtype() != DType::kFloat32 ||
        params[p]->num_elements() != channels) {
      return false;
    }
  }
  return true;
}

// y = scale * (conv(x) - mean) / sqrt(var + eps) + bias
//   = conv'(x) with W' = W * s[m] and B' = (B - mean) * s + bias, s = scale / sqrt(var + eps).
absl::Status FoldBatchNorms(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    Node& conv = graph->nodes[n];
    if (conv.op_type != "Conv" || conv.outputs.size() != 1) continue;
    const int y = conv.outputs[0];
    if (!PrivateValue(*graph, readers, y)) continue;
    const int bn_index = readers[y][0];
    const Node& bn = graph->nodes[bn_index];
    if (bn.op_type != "BatchNormalization" || bn.outputs.size() != 1 || bn.inputs.size() != 5 ||
        bn.inputs[0] != y) {
      continue;
    }
    if (absl::StatusOr<int64_t> mode = bn.attributes.GetInt("training_mode", 0);
        !mode.ok() || *mode) {
      continue;
    }
    const Tensor* w = Initializer(*graph, conv.inputs[1]);
    const Tensor* b = conv.inputs.size() > 2 && conv.inputs[2] >= 0
                          ? Initializer(*graph, conv.inputs[2])
                          : nullptr;
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    const Tensor* params[4];
    const bool known = w != nullptr && w->dtype() == DType::kFloat32 && w->rank() >= 3 &&
                       (!has_bias || b != nullptr) &&
                       ConstantBatchNormParams(*graph, bn, w->shape()[0], params);
    if (!known) continue;
    absl::StatusOr<float> epsilon = bn.attributes.GetFloat("epsilon", 1e-5f);
    if (!epsilon.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", bn.name, "': ", epsilon.status().message()));
    }
    const int64_t out_channels = w->shape()[0];
    const int64_t per_channel = w->num_elements() / out_channels;
    Tensor folded_w = Tensor::Host(DType::kFloat32, w->shape());
    Tensor folded_b = Tensor::Host(DType::kFloat32, {out_channels});
    const float *scale = params[0]->data<float>(), *shift = params[1]->data<float>(),
                *mean = params[2]->data<float>(), *var = params[3]->data<float>();
    for (int64_t m = 0; m < out_channels; ++m) {
      const double s = scale[m] / std::sqrt(static_cast<double>(var[m]) + *epsilon);
      for (int64_t i = 0; i < per_channel; ++i) {
        folded_w.data<float>()[m * per_channel + i] =
            static_cast<float>(w->data<float>()[m * per_channel + i] * s);
      }
      const double bias = has_bias ? b->data<float>()[m] : 0.0;
      folded_b.data<float>()[m] = static_cast<float>((bias - mean[m]) * s + shift[m]);
    }
    const int new_w = AddInitializer(graph, conv.name + ".bn_folded_weight", std::move(folded_w));
    const int new_b = AddInitializer(graph, conv.name + ".bn_folded_bias", std::move(folded_b));
    Node& rewritten = graph->nodes[n];  // AddInitializer does not touch nodes.
    rewritten.inputs.resize(3);
    rewritten.inputs[1] = new_w;
    rewritten.inputs[2] = new_b;
    rewritten.outputs[0] = graph->nodes[bn_index].outputs[0];
    dead.insert(bn_index);
  }
  RemoveNodes(graph, dead);
  return absl::OkStatus();
}

// A BatchNormalization no Conv absorbed (a pre-activation, as in densenet)
// of a 4-D input becomes a depthwise 1x1 Conv with W = s and B = shift -
// mean * s, s = scale / sqrt(var + eps): the CPU backend then runs it in the
// layout of the convolutions around it, with the Relu after it fused.
void BatchNormsToDepthwiseConvs(Graph* graph) {
  for (Node& bn : graph->nodes) {
    if (bn.op_type != "BatchNormalization" || bn.outputs.size() != 1 || bn.inputs.size() != 5 ||
        bn.inputs[0] < 0) {
      continue;
    }
    absl::StatusOr<int64_t> mode = bn.attributes.GetInt("training_mode", 0);
    absl::StatusOr<float> epsilon = bn.attributes.GetFloat("epsilon", 1e-5f);
    const TensorType& x = graph->values[bn.inputs[0]].type;
    if (!mode.ok() || *mode || !epsilon.ok() || x.dtype != DType::kFloat32 || x.shape.size() != 4) {
      continue;
    }
    const Tensor* scale_param = Initializer(*graph, bn.inputs[1]);
    const int64_t channels =
        scale_param != nullptr && scale_param->rank() == 1 ? scale_param->num_elements() : 0;
    const Tensor* params[4];
    if (channels == 0 || (x.shape[1] != kAnyDim && x.shape[1] != channels) ||
        !ConstantBatchNormParams(*graph, bn, channels, params)) {
      continue;
    }
    Tensor w = Tensor::Host(DType::kFloat32, {channels, 1, 1, 1});
    Tensor b = Tensor::Host(DType::kFloat32, {channels});
    const float *scale = params[0]->data<float>(), *shift = params[1]->data<float>(),
                *mean = params[2]->data<float>(), *var = params[3]->data<float>();
    for (int64_t c = 0; c < channels; ++c) {
      const double s = scale[c] / std::sqrt(static_cast<double>(var[c]) + *epsilon);
      w.data<float>()[c] = static_cast<float>(s);
      b.data<float>()[c] = static_cast<float>(shift[c] - mean[c] * s);
    }
    Node conv;
    conv.name = bn.name;
    conv.op_type = "Conv";
    conv.inputs = {bn.inputs[0], AddInitializer(graph, bn.name + ".depthwise_weight", std::move(w)),
                   AddInitializer(graph, bn.name + ".depthwise_bias", std::move(b))};
    conv.outputs = bn.outputs;
    conv.attributes.Set("group", channels);
    conv.attributes.Set("kernel_shape", std::vector<int64_t>{1, 1});
    bn = std::move(conv);
  }
}

// The single float value of initializer `v` (a scalar or [1], which
// broadcast without raising any operand's rank), or nullopt.
std::optional<float> ScalarInitializer(const Graph& graph, int v) {
  const Tensor* t = v < 0 ? nullptr : Initializer(graph, v);
  if (t == nullptr || t->num_elements() != 1 || t->rank() > 1) return std::nullopt;
  if (t->dtype() == DType::kFloat32) return t->data<float>()[0];
  if (t->dtype() == DType::kInt64) return static_cast<float>(t->data<int64_t>()[0]);
  return std::nullopt;
}

// A ReduceMean over the last dim only, dims kept (axes [-1], or [rank - 1]
// where the input's rank is known), as an attribute or, from opset 18, a
// constant input.
bool MeanOfLastDim(const Graph& graph, const Node& node) {
  if (node.op_type != "ReduceMean" || node.outputs.size() != 1 || node.inputs.empty() ||
      node.inputs[0] < 0) {
    return false;
  }
  absl::StatusOr<int64_t> keepdims = node.attributes.GetInt("keepdims", 1);
  if (!keepdims.ok() || *keepdims != 1) return false;
  std::vector<int64_t> axes;
  if (node.inputs.size() > 1 && node.inputs[1] >= 0) {
    const Tensor* t = Initializer(graph, node.inputs[1]);
    if (t == nullptr || t->dtype() != DType::kInt64) return false;
    axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->num_elements());
  } else {
    absl::StatusOr<std::vector<int64_t>> attribute = node.attributes.GetInts("axes", {});
    if (!attribute.ok()) return false;
    axes = *attribute;
  }
  const int64_t rank = static_cast<int64_t>(graph.values[node.inputs[0]].type.shape.size());
  return axes.size() == 1 && (axes[0] == -1 || (rank > 0 && axes[0] == rank - 1));
}

// The activation `node` applies as (alpha, beta), or false when it cannot be fused.
bool FusibleActivation(const Graph& graph, const Node& node, float* alpha, float* beta) {
  *alpha = 0;
  *beta = 0;
  if (node.op_type == "Relu" || node.op_type == "Sigmoid" || node.op_type == "Tanh" ||
      node.op_type == "HardSwish") {
    return true;
  }
  if (node.op_type == "LeakyRelu") {
    absl::StatusOr<float> a = node.attributes.GetFloat("alpha", 0.01f);
    *alpha = a.ok() ? *a : 0;
    return a.ok();
  }
  if (node.op_type == "HardSigmoid") {
    absl::StatusOr<float> a = node.attributes.GetFloat("alpha", 0.2f);
    absl::StatusOr<float> b = node.attributes.GetFloat("beta", 0.5f);
    *alpha = a.ok() ? *a : 0;
    *beta = b.ok() ? *b : 0;
    return a.ok() && b.ok();
  }
  if (node.op_type == "Clip") {
    // Opset 11+: bounds are optional scalar inputs, fusible when constant.
    *alpha = -INFINITY;
    *beta = INFINITY;
    for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
      if (node.inputs[i] < 0) continue;
      const Tensor* bound = Initializer(graph, node.inputs[i]);
      if (bound == nullptr || bound->dtype() != DType::kFloat32 || bound->num_elements() != 1) {
        return false;
      }
      (i == 1 ? *alpha : *beta) = *bound->data<float>();
    }
    return true;
  }
  return false;
}

// y -> Sigmoid -> s, then Mul(y, s): SiLU as exporters write it; and y ->
// HardSigmoid(1/6, 1/2) -> s, then Mul(y, s): HardSwish as PyTorch writes it
// before opset 14 (mobilenet_v3). y is read by exactly those two nodes, s
// only by the Mul. Returns the fused activation and adds both nodes to
// `dead`, or returns nullopt.
std::optional<std::pair<int, FusedActivation>> GatedActivationOf(
    const Graph& graph, const std::vector<std::vector<int>>& readers, int y, std::set<int>* dead) {
  if (readers[y].size() != 2 || IsGraphOutput(graph, y)) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    const int gate_index = readers[y][i], mul_index = readers[y][1 - i];
    const Node& gate = graph.nodes[gate_index];
    const Node& mul = graph.nodes[mul_index];
    if (gate.outputs.size() != 1 || mul.op_type != "Mul" || mul.inputs.size() != 2 ||
        mul.outputs.size() != 1) {
      continue;
    }
    std::optional<FusedActivation> fused;
    if (gate.op_type == "Sigmoid") {
      fused = FusedActivation{"Swish", 1.0f, 0.0f};
    } else if (gate.op_type == "HardSigmoid") {
      absl::StatusOr<float> alpha = gate.attributes.GetFloat("alpha", 0.2f);
      absl::StatusOr<float> beta = gate.attributes.GetFloat("beta", 0.5f);
      if (alpha.ok() && beta.ok() && std::fabs(*alpha - 1.0f / 6) < 1e-7f && *beta == 0.5f) {
        fused = FusedActivation{"HardSwish", 0.0f, 0.0f};
      }
    }
    const int s = gate.outputs[0];
    const bool pairs =
        (mul.inputs[0] == y && mul.inputs[1] == s) || (mul.inputs[0] == s && mul.inputs[1] == y);
    if (!fused || !pairs || !PrivateValue(graph, readers, s)) continue;
    dead->insert(gate_index);
    dead->insert(mul_index);
    return std::make_pair(mul_index, *fused);
  }
  return std::nullopt;
}

// y -> Div(y, sqrt(2)) (or Mul by 1 / sqrt(2)) -> Erf -> Add 1 -> Mul(y, .)
// -> Mul 0.5: the exact GELU as PyTorch exports it before opset 20 (convnext,
// the transformers' feed-forward layers). y is read by the Div and the first
// Mul only. Returns the last Mul and adds the five nodes to `dead`, or
// returns nullopt.
std::optional<std::pair<int, FusedActivation>> GeluOf(const Graph& graph,
                                                      const std::vector<std::vector<int>>& readers,
                                                      int y, std::set<int>* dead) {
  if (readers[y].size() != 2 || IsGraphOutput(graph, y)) return std::nullopt;
  constexpr float kSqrt2 = 1.41421356237f;
  for (int i = 0; i < 2; ++i) {
    const int scale = readers[y][i], gate = readers[y][1 - i];
    const Node& s = graph.nodes[scale];
    if (s.outputs.size() != 1 || s.inputs.size() != 2 || s.inputs[0] != y) continue;
    const std::optional<float> c = ScalarInitializer(graph, s.inputs[1]);
    const bool scales = c && ((s.op_type == "Div" && std::fabs(*c - kSqrt2) < 1e-6f) ||
                              (s.op_type == "Mul" && std::fabs(*c - 1 / kSqrt2) < 1e-6f));
    if (!scales) continue;
    const int erf = ReaderOf(graph, readers, s.outputs[0], "Erf", 1);
    if (erf < 0) continue;
    const int e = graph.nodes[erf].outputs[0];
    const int add = ReaderOf(graph, readers, e, "Add", 1);
    if (add < 0 || ScalarInitializer(graph, OtherInput(graph.nodes[add], e)) != 1.0f) continue;
    const int a = graph.nodes[add].outputs[0];
    const int mul = ReaderOf(graph, readers, a, "Mul", 1);
    if (mul != gate || OtherInput(graph.nodes[mul], a) != y) continue;
    const int g = graph.nodes[mul].outputs[0];
    const int half = ReaderOf(graph, readers, g, "Mul", 1);
    if (half < 0 || ScalarInitializer(graph, OtherInput(graph.nodes[half], g)) != 0.5f) continue;
    dead->insert({scale, erf, add, mul, half});
    return std::make_pair(half, FusedActivation{"Gelu", 0.0f, 0.0f});
  }
  return std::nullopt;
}

void FuseActivations(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    Node& producer = graph->nodes[n];
    if ((producer.op_type != "Conv" && producer.op_type != "Gemm" &&
         producer.op_type != "MatMul") ||
        producer.outputs.size() != 1 || producer.attributes.Has(kFusedActivation)) {
      continue;
    }
    const int y = producer.outputs[0];
    std::optional<std::pair<int, FusedActivation>> gated =
        GatedActivationOf(*graph, readers, y, &dead);
    if (!gated) gated = GeluOf(*graph, readers, y, &dead);
    if (gated) {
      WriteFusedActivation(gated->second, &producer.attributes);
      producer.outputs[0] = graph->nodes[gated->first].outputs[0];
      continue;
    }
    if (!PrivateValue(*graph, readers, y)) continue;
    const Node& activation = graph->nodes[readers[y][0]];
    float alpha, beta;
    if (activation.outputs.size() != 1 || activation.inputs[0] != y ||
        !FusibleActivation(*graph, activation, &alpha, &beta)) {
      continue;
    }
    WriteFusedActivation(FusedActivation{activation.op_type, alpha, beta}, &producer.attributes);
    producer.outputs[0] = activation.outputs[0];
    dead.insert(readers[y][0]);
  }
  RemoveNodes(graph, dead);
}

// The exact GELU's five nodes where FuseActivations found no product to
// fuse them into (after a bias Add, a dequantizing Mul, a LayerNorm) become
// one Gelu node: one vectorized pass (oneDNN's gelu_erf on CPU slots)
// instead of five, the Erf among them elementwise on libm.
void FuseStandaloneGelus(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  std::vector<int> values(graph->inputs.begin(), graph->inputs.end());
  for (const Node& node : graph->nodes)
    values.insert(values.end(), node.outputs.begin(), node.outputs.end());
  for (int y : values) {
    if (y < 0) continue;
    std::set<int> found;
    std::optional<std::pair<int, FusedActivation>> gelu = GeluOf(*graph, readers, y, &found);
    if (!gelu || std::any_of(found.begin(), found.end(), [&](int n) { return dead.count(n); })) {
      continue;
    }
    Node& last = graph->nodes[gelu->first];
    last.op_type = "Gelu";
    last.inputs = {y};
    last.attributes = Attributes();
    found.erase(gelu->first);
    dead.insert(found.begin(), found.end());
  }
  RemoveNodes(graph, dead);
}

// Same rank and the same dims where ONNX's shape inference knows them (an
// open batch dim matches an open one): then the Add needs no broadcasting.
// The Conv's shape rule checks the concrete types again in every plan.
bool SameShape(const TensorType& a, const TensorType& b) {
  if (a.shape.empty() || a.shape.size() != b.shape.size() || a.dtype != b.dtype) return false;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] != b.shape[d]) return false;
    if (d > 0 && a.shape[d] == kAnyDim) return false;
  }
  return true;
}

// Conv -> Add(conv, other) becomes one Conv that adds `other` to its output
// (oneDNN's sum post-op), so a residual connection costs no separate pass;
// a Relu after it then fuses too (FuseActivations runs next).
void FuseResidualAdds(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    Node& conv = graph->nodes[n];
    if (conv.op_type != "Conv" || conv.outputs.size() != 1 ||
        conv.attributes.Has(kFusedActivation) || HasFusedSum(conv.attributes) ||
        conv.inputs.size() < 2 || Initializer(*graph, conv.inputs[1]) == nullptr) {
      continue;
    }
    const int y = conv.outputs[0];
    if (!PrivateValue(*graph, readers, y)) continue;
    const int add_index = readers[y][0];
    const Node& add = graph->nodes[add_index];
    if (add.op_type != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    const int other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
    if (other == y || other < 0 || !SameShape(graph->values[y].type, graph->values[other].type) ||
        !SameShape(graph->values[y].type, graph->values[add.outputs[0]].type)) {
      continue;
    }
    // The fused node takes the Add's place: `other` may be computed after
    // the Conv (a downsampling branch), never after the Add.
    Node fused = std::move(conv);
    fused.inputs.resize(3, Node::kAbsentInput);
    fused.inputs.push_back(other);
    fused.attributes.Set(kFusedSum, int64_t{1});
    fused.outputs[0] = add.outputs[0];
    graph->nodes[add_index] = std::move(fused);
    dead.insert(static_cast<int>(n));
  }
  RemoveNodes(graph, dead);
}

// An initializer of one value per element of the last dim (`channels`,
// kAnyDim where unknown, then more than one), leading 1s allowed but no more
// dims than `max_rank` (so that broadcasting it raises no rank): a
// LayerNormalization's Scale or B, a MatMul's bias.
bool PerChannelInitializer(const Graph& graph, int v, int64_t channels, size_t max_rank) {
  const Tensor* t = v < 0 ? nullptr : Initializer(graph, v);
  if (t == nullptr || t->dtype() != DType::kFloat32 || t->rank() == 0 ||
      static_cast<size_t>(t->rank()) > max_rank) {
    return false;
  }
  for (int d = 0; d + 1 < t->rank(); ++d) {
    if (t->shape()[d] != 1) return false;
  }
  const int64_t last = t->shape().back();
  return channels == kAnyDim ? last > 1 : last == channels;
}

// A layer normalization's nodes as FuseLayerNorms finds them.
struct LayerNormMatch {
  int x = -1;
  float epsilon = 0;
  std::vector<int> pattern;   // Its nodes, which the fused node replaces.
  int y = -1;                 // Its output.
  int scale = -1, bias = -1;  // Gamma and beta, or -1.
};

// The node squaring `d`, Pow(d, 2) or Mul(d, d), or -1.
int SquareOf(const Graph& graph, const std::vector<std::vector<int>>& readers, int d) {
  const int pow = ReaderOf(graph, readers, d, "Pow", 2);
  // Mul(d, d) lists d twice among its readers.
  const int square = pow >= 0 ? pow : ReaderOf(graph, readers, d, "Mul", 3);
  if (square < 0) return -1;
  const Node& sq = graph.nodes[square];
  if (pow >= 0 ? (sq.inputs.size() != 2 || sq.inputs[0] != d ||
                  ScalarInitializer(graph, sq.inputs[1]) != 2.0f)
               : sq.inputs != std::vector<int>{d, d}) {
    return -1;
  }
  return square;
}

// The normalization from m = ReduceMean(x) (node `n`) to d / Sqrt(v + eps),
// or nullopt.
std::optional<LayerNormMatch> MatchNormalization(const Graph& graph,
                                                 const std::vector<std::vector<int>>& readers,
                                                 int n) {
  const Node& mean = graph.nodes[n];
  if (!MeanOfLastDim(graph, mean)) return std::nullopt;
  const int x = mean.inputs[0];
  const int sub = ReaderOf(graph, readers, mean.outputs[0], "Sub", 1);
  if (sub < 0 || graph.nodes[sub].inputs != std::vector<int>{x, mean.outputs[0]}) {
    return std::nullopt;
  }
  const int d = graph.nodes[sub].outputs[0];
  const int square = SquareOf(graph, readers, d);
  if (square < 0) return std::nullopt;
  // Mul(d, d) is a third reader of d.
  const int div = ReaderOf(graph, readers, d, "Div", graph.nodes[square].op_type == "Pow" ? 2 : 3);
  const int variance = ReaderOf(graph, readers, graph.nodes[square].outputs[0], "ReduceMean", 1);
  if (div < 0 || variance < 0 || !MeanOfLastDim(graph, graph.nodes[variance])) return std::nullopt;
  const int add_eps = ReaderOf(graph, readers, graph.nodes[variance].outputs[0], "Add", 1);
  if (add_eps < 0) return std::nullopt;
  const std::optional<float> epsilon =
      ScalarInitializer(graph, OtherInput(graph.nodes[add_eps], graph.nodes[variance].outputs[0]));
  const int sqrt = ReaderOf(graph, readers, graph.nodes[add_eps].outputs[0], "Sqrt", 1);
  if (!epsilon || sqrt < 0 || graph.nodes[sqrt].outputs[0] != graph.nodes[div].inputs[1] ||
      graph.nodes[div].inputs[0] != d ||
      !PrivateValue(graph, readers, graph.nodes[sqrt].outputs[0])) {
    return std::nullopt;
  }
  return LayerNormMatch{
      x, *epsilon, {n, sub, square, variance, add_eps, sqrt, div}, graph.nodes[div].outputs[0]};
}

// Where `op_type` (Mul for gamma, Add for beta) by a per-channel initializer
// reads the pattern's output, it joins the pattern and its output becomes
// the pattern's. The initializer, or -1.
int ExtendPerChannel(const Graph& graph, const std::vector<std::vector<int>>& readers,
                     const char* op_type, int64_t channels, size_t max_rank,
                     LayerNormMatch* match) {
  const int node = ReaderOf(graph, readers, match->y, op_type, 1);
  if (node < 0) return -1;
  const int parameter = OtherInput(graph.nodes[node], match->y);
  if (!PerChannelInitializer(graph, parameter, channels, max_rank)) return -1;
  match->pattern.push_back(node);
  match->y = graph.nodes[node].outputs[0];
  return parameter;
}

// One LayerNormalization, named after the ReduceMean (node `n`), in place of
// `match`'s nodes, the others of which join `dead`.
void ReplaceWithLayerNorm(Graph* graph, int n, const LayerNormMatch& match, std::set<int>* dead) {
  Node fused;
  fused.name = graph->nodes[n].name;
  fused.op_type = "LayerNormalization";
  fused.inputs = {match.x, match.scale};
  if (match.bias >= 0) fused.inputs.push_back(match.bias);
  fused.outputs = {match.y};
  fused.attributes.Set("axis", int64_t{-1});
  fused.attributes.Set("epsilon", match.epsilon);
  // The last node of the pattern is the fused node's place: every input is
  // known there.
  const int last = *std::max_element(match.pattern.begin(), match.pattern.end());
  for (int p : match.pattern) {
    if (p != last) dead->insert(p);
  }
  graph->nodes[last] = std::move(fused);
}

// Layer normalization over the last dim as exporters before opset 17 write
// it (torch.nn.LayerNorm, convnext's and the transformers'):
//   m = ReduceMean(x), d = x - m, v = ReduceMean(d^2) (Pow 2 or d * d),
//   y = d / Sqrt(v + eps) [* gamma] [+ beta]
// becomes one LayerNormalization (axis -1), so the CPU backend makes one
// pass per row instead of nine over the tensor, and none of them
// broadcasts a [..., 1] operand along the innermost dim.
void FuseLayerNorms(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    if (dead.count(static_cast<int>(n))) continue;
    std::optional<LayerNormMatch> match = MatchNormalization(*graph, readers, static_cast<int>(n));
    if (!match) continue;
    const std::vector<int64_t>& x_shape = graph->values[match->x].type.shape;
    const int64_t channels = x_shape.empty() ? kAnyDim : x_shape.back();
    // X's rank where shape inference knows it; else parameters of one dim only.
    const size_t max_rank = x_shape.empty() ? 1 : x_shape.size();
    match->scale = ExtendPerChannel(*graph, readers, "Mul", channels, max_rank, &*match);
    if (match->scale >= 0) {
      match->bias = ExtendPerChannel(*graph, readers, "Add", channels, max_rank, &*match);
    } else {
      if (channels == kAnyDim || channels <= 0) continue;
      Tensor ones = Tensor::Host(DType::kFloat32, {channels});
      std::fill(ones.data<float>(), ones.data<float>() + channels, 1.0f);
      match->scale =
          AddInitializer(graph, graph->nodes[n].name + ".layer_norm_scale", std::move(ones));
      readers.emplace_back();
    }
    ReplaceWithLayerNorm(graph, static_cast<int>(n), *match, &dead);
  }
  RemoveNodes(graph, dead);
}

// MatMul(A, B) -> Add(., bias) with B and bias constant and bias one value
// per output column becomes one MatMul with the bias fused (input 2), which
// oneDNN and cuBLAS add while writing Y; an activation after it then fuses
// too (a linear layer of a transformer or convnext block: A [..., K] times
// weights [K, N] plus bias [N]).
void FuseMatMulBiases(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  std::set<int> dead;
  for (Node& matmul : graph->nodes) {
    if (matmul.op_type != "MatMul" || matmul.inputs.size() != 2 || matmul.outputs.size() != 1 ||
        matmul.attributes.Has(kFusedActivation) || HasFusedBias(matmul.attributes)) {
      continue;
    }
    const Tensor* b = Initializer(*graph, matmul.inputs[1]);
    const int y = matmul.outputs[0];
    const int add = ReaderOf(*graph, readers, y, "Add", 1);
    if (b == nullptr || b->dtype() != DType::kFloat32 || b->rank() < 2 || add < 0) continue;
    const int bias = OtherInput(graph->nodes[add], y);
    // The bias must not raise the MatMul's rank (where shape inference did
    // not find it, the bias may have one dim only).
    const size_t y_rank = graph->values[y].type.shape.size();
    if (!PerChannelInitializer(*graph, bias, b->shape().back(), y_rank == 0 ? 1 : y_rank)) {
      continue;
    }
    matmul.inputs.push_back(bias);
    matmul.attributes.Set(kFusedBias, int64_t{1});
    matmul.outputs[0] = graph->nodes[add].outputs[0];
    dead.insert(add);
  }
  RemoveNodes(graph, dead);
}

void DropUnreadInitializers(Graph* graph) {
  std::vector<std::vector<int>> readers = Readers(*graph);
  for (auto it = graph->initializers.begin(); it != graph->initializers.end();) {
    if (readers[it->first].empty() && !IsGraphOutput(*graph, it->first)) {
      it = graph->initializers.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

absl::Status OptimizeForInference(Graph* graph) {
  ConstantsToInitializers(graph);
  RemovePassThroughs(graph);
  FuseQuantizedConvs(graph);
  REPLICAD_RETURN_IF_ERROR(FoldBatchNorms(graph));
  BatchNormsToDepthwiseConvs(graph);
  FuseLayerNorms(graph);
  FuseAttention(graph);
  FuseMatMulBiases(graph);
  FuseResidualAdds(graph);
  FuseActivations(graph);
  FuseStandaloneGelus(graph);
  DropUnreadInitializers(graph);
  return absl::OkStatus();
}

}  // namespace replicad
