#include "core/model/onnx_import.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status_macros.h"
#include "core/model/exporter_forms.h"
#include "core/model/graph_optimizer.h"
#include "core/model/half_float_widening.h"
#include "core/model/if_branches.h"
#include "core/model/old_resize_coordinates.h"
#include "core/model/one_d_windows.h"
#include "core/model/onnx_tensor.h"
#include "core/model/quantized_contrib_ops.h"
#include "core/ops/op_registry.h"
#include "core/ops/training_ops.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

namespace replicad {
namespace {

constexpr int kMinOpset = 11;
constexpr int kMaxOpset = 17;

absl::StatusOr<AttributeValue> ConvertAttribute(const onnx::AttributeProto& a,
                                                const std::string& node) {
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      return AttributeValue(static_cast<int64_t>(a.i()));
    case onnx::AttributeProto::FLOAT:
      return AttributeValue(a.f());
    case onnx::AttributeProto::STRING:
      return AttributeValue(a.s());
    case onnx::AttributeProto::INTS:
      return AttributeValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case onnx::AttributeProto::FLOATS:
      return AttributeValue(std::vector<float>(a.floats().begin(), a.floats().end()));
    case onnx::AttributeProto::TENSOR: {
      absl::StatusOr<Tensor> t = TensorFromOnnx(a.t());
      if (!t.ok()) {
        return absl::Status(t.status().code(), absl::StrCat("node '", node, "' attribute '",
                                                            a.name(), "': ", t.status().message()));
      }
      return AttributeValue(*std::move(t));
    }
    default:
      return absl::UnimplementedError(absl::StrCat("node '", node, "' attribute '", a.name(),
                                                   "' has an unsupported attribute type ",
                                                   static_cast<int>(a.type())));
  }
}

// The value's declared type; open or unnamed dimensions become kAnyDim.
absl::StatusOr<TensorType> ConvertValueInfo(const onnx::ValueInfoProto& info, const char* role) {
  if (!info.type().has_tensor_type()) {
    return absl::InvalidArgumentError(absl::StrCat(role, " '", info.name(), "' is not a tensor"));
  }
  const auto& tt = info.type().tensor_type();
  absl::StatusOr<DType> dtype = DTypeFromOnnx(tt.elem_type());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " '", info.name(), "': ", dtype.status().message()));
  }
  TensorType type{*dtype, {}};
  for (const auto& dim : tt.shape().dim()) {
    type.shape.push_back(dim.has_dim_value() ? dim.dim_value() : kAnyDim);
  }
  return type;
}

int DefaultDomainOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx")
      return static_cast<int>(opset.version());
  }
  return 0;
}

// Each domain imported once. ONNX (libonnx 1.12) takes the last of several
// entries for a domain while DefaultDomainOpset takes the first: a model
// importing the default domain at 108 and at 6 was read as a modern model
// here and as an opset-6 one by ONNX's shape inference, whose Gemm-6 rule
// then crashed on a scalar B that only the conversion checks catch.
absl::Status CheckOpsetImports(const onnx::ModelProto& model) {
  std::map<std::string, int64_t> version_of;
  for (const auto& opset : model.opset_import()) {
    const std::string domain = opset.domain() == "ai.onnx" ? "" : opset.domain();
    auto [it, inserted] = version_of.emplace(domain, opset.version());
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "opset_import lists domain '", domain.empty() ? "ai.onnx" : domain, "' twice (versions ",
          it->second, " and ", opset.version(), "); expected it once"));
    }
  }
  return absl::OkStatus();
}

// The index of each named value of the graph being converted.
class ValueNames {
 public:
  explicit ValueNames(Graph* graph) : graph_(graph) {}

  // The value named `name`, added to the graph on first mention.
  int Index(const std::string& name) {
    auto [it, inserted] = index_.emplace(name, static_cast<int>(graph_->values.size()));
    if (inserted) graph_->values.push_back(Value{name, {}});
    return it->second;
  }

  // The value named `name`, or -1 where none is.
  int Find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }

 private:
  Graph* graph_;
  std::unordered_map<std::string, int> index_;
};

// Moves each initializer's values out of `g` (its data fields are cleared
// as they are converted: a model's weights are held once, not twice, while
// the rest converts), then adds the bound inputs.
absl::Status ConvertInitializers(onnx::GraphProto* g, const OnnxImportOptions& options,
                                 ValueNames* names, Graph* graph) {
  for (onnx::TensorProto& init : *g->mutable_initializer()) {
    REPLICAD_ASSIGN_OR_RETURN(Tensor t, TensorFromOnnx(init));
    const int v = names->Index(init.name());
    graph->values[v].type = t.type();
    graph->initializers[v] = std::move(t);
    init.clear_raw_data();
    init.clear_float_data();
    init.clear_int64_data();
    init.clear_int32_data();
    init.clear_double_data();
  }
  for (const auto& [name, tensor] : options.bind_inputs) {
    const int v = names->Index(name);
    graph->values[v].type = tensor.type();
    graph->initializers[v] = tensor;
  }
  return absl::OkStatus();
}

absl::Status ConvertInputs(const onnx::GraphProto& g, ValueNames* names, Graph* graph) {
  for (const auto& input : g.input()) {
    const int v = names->Index(input.name());
    if (graph->initializers.count(v)) continue;  // IR < 4 lists initializers as inputs too.
    REPLICAD_ASSIGN_OR_RETURN(TensorType type, ConvertValueInfo(input, "input"));
    graph->values[v].type = type;
    graph->inputs.push_back(v);
  }
  return absl::OkStatus();
}

// Appends node `n` to `graph`, or, where replicad lacks its operator, names
// it in `unsupported`.
absl::Status ConvertNode(const onnx::NodeProto& proto, int n, ValueNames* names, Graph* graph,
                         std::vector<std::string>* unsupported) {
  Node node;
  node.name = proto.name().empty() ? absl::StrCat(proto.op_type(), "_", n) : proto.name();
  node.op_type = proto.op_type();
  const bool default_domain = proto.domain().empty() || proto.domain() == "ai.onnx";
  // Training-only operators (replicad.*) exist only in graphs replicad builds.
  const bool internal =
      proto.op_type().compare(0, kTrainingOpPrefix.size(), kTrainingOpPrefix) == 0;
  if (!default_domain || internal || FindOp(proto.op_type()) == nullptr) {
    unsupported->push_back(absl::StrCat(
        default_domain ? "" : proto.domain() + "::", proto.op_type(), " (node '", node.name, "')"));
    return absl::OkStatus();
  }
  for (const std::string& in : proto.input()) {
    node.inputs.push_back(in.empty() ? Node::kAbsentInput : names->Index(in));
  }
  for (const std::string& out : proto.output()) {
    // An output left unnamed (an optional one nobody reads, e.g.
    // LayerNormalization's Mean) gets a value of its own: unnamed outputs
    // of two nodes must not share memory.
    if (out.empty()) {
      node.outputs.push_back(static_cast<int>(graph->values.size()));
      graph->values.push_back(Value{"", {}});
      continue;
    }
    node.outputs.push_back(names->Index(out));
  }
  for (const auto& attr : proto.attribute()) {
    if (attr.name() == kGuardConditions) {
      for (const std::string& condition : attr.strings()) {
        node.guards.push_back(Guard{names->Index(condition), false});
      }
      continue;
    }
    if (attr.name() == kGuardBranches) continue;  // Read with the conditions, below.
    REPLICAD_ASSIGN_OR_RETURN(AttributeValue value, ConvertAttribute(attr, node.name));
    node.attributes.Set(attr.name(), std::move(value));
  }
  for (const auto& attr : proto.attribute()) {
    if (attr.name() != kGuardBranches) continue;
    for (int i = 0; i < attr.ints_size() && i < static_cast<int>(node.guards.size()); ++i) {
      node.guards[i].branch = attr.ints(i) != 0;
    }
  }
  graph->nodes.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status ConvertNodes(const onnx::GraphProto& g, ValueNames* names, Graph* graph) {
  std::vector<std::string> unsupported;
  for (int n = 0; n < g.node_size(); ++n) {
    REPLICAD_RETURN_IF_ERROR(ConvertNode(g.node(n), n, names, graph, &unsupported));
  }
  if (!unsupported.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported operators: ", absl::StrJoin(unsupported, ", ")));
  }
  return absl::OkStatus();
}

// Types ONNX's shape inference found for intermediate values: the
// optimizer reads them (kAnyDim where symbolic); plans infer their own.
void ConvertValueTypes(const onnx::GraphProto& g, const ValueNames& names, Graph* graph) {
  for (const auto& info : g.value_info()) {
    const int v = names.Find(info.name());
    if (v < 0 || graph->initializers.count(v)) continue;
    absl::StatusOr<TensorType> type = ConvertValueInfo(info, "value");
    if (type.ok()) graph->values[v].type = *type;
  }
}

absl::Status ConvertOutputs(const onnx::GraphProto& g, const ValueNames& names, Graph* graph) {
  for (const auto& output : g.output()) {
    const int v = names.Find(output.name());
    if (v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", output.name(), "' is produced by no node"));
    }
    absl::StatusOr<TensorType> type = ConvertValueInfo(output, "output");
    if (!type.ok()) return type.status();
    graph->values[v].type = *type;
    graph->outputs.push_back(v);
  }
  return absl::OkStatus();
}

// Moves each initializer's values out of `model` (see ConvertInitializers).
absl::StatusOr<Graph> ConvertGraph(onnx::ModelProto& model, const OnnxImportOptions& options) {
  Graph graph;
  graph.opset = DefaultDomainOpset(model);
  if (graph.opset > kMaxOpset || graph.opset < kMinOpset) {
    return absl::UnimplementedError(absl::StrCat("model opset is ", graph.opset,
                                                 "; replicad supports opsets ", kMinOpset, " to ",
                                                 kMaxOpset));
  }
  ValueNames names(&graph);
  REPLICAD_RETURN_IF_ERROR(ConvertInitializers(model.mutable_graph(), options, &names, &graph));
  const onnx::GraphProto& g = model.graph();
  REPLICAD_RETURN_IF_ERROR(ConvertInputs(g, &names, &graph));
  REPLICAD_RETURN_IF_ERROR(ConvertNodes(g, &names, &graph));
  ConvertValueTypes(g, names, &graph);
  REPLICAD_RETURN_IF_ERROR(ConvertOutputs(g, names, &graph));
  return graph;
}

// Every graph output must be a graph input, an initializer or a node's
// output. ONNX's version converter (libonnx 1.12) dereferences a null value
// for any other, and its checker lets such a graph through.
absl::Status CheckOutputsDefined(const onnx::GraphProto& g) {
  std::set<std::string> defined;
  for (const auto& input : g.input()) defined.insert(input.name());
  for (const auto& init : g.initializer()) defined.insert(init.name());
  for (const auto& node : g.node()) defined.insert(node.output().begin(), node.output().end());
  for (const auto& output : g.output()) {
    if (!defined.count(output.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", output.name(), "' is produced by no node"));
    }
  }
  return absl::OkStatus();
}

// The graphs attribute `a` holds (an If's branches, a Loop's or Scan's
// body), which every check of a model's nodes visits too.
std::vector<const onnx::GraphProto*> Subgraphs(const onnx::AttributeProto& a) {
  std::vector<const onnx::GraphProto*> graphs;
  if (a.has_g()) graphs.push_back(&a.g());
  for (const onnx::GraphProto& sub : a.graphs()) graphs.push_back(&sub);
  return graphs;
}

// ONNX's shape inference (libonnx 1.12) divides by a pooling or
// convolution node's strides without looking at them, and its checker does
// not look at attribute values either: a zero stride killed the process
// with SIGFPE, which no exception handler catches. So strides (and
// dilations, which the operators define as positive too) are checked before
// ONNX sees the model, in every graph it would visit (subgraphs of If, Loop
// and Scan included).
absl::Status CheckWindowAttributes(const onnx::GraphProto& g) {
  for (int n = 0; n < g.node_size(); ++n) {
    const onnx::NodeProto& node = g.node(n);
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (default_domain && (a.name() == "strides" || a.name() == "dilations")) {
        for (int64_t v : a.ints()) {
          if (v > 0) continue;
          return absl::InvalidArgumentError(absl::StrCat(
              "node '", node.name().empty() ? absl::StrCat(node.op_type(), "_", n) : node.name(),
              "' (", node.op_type(), "): attribute ", a.name(),
              " expected positive values, received [", absl::StrJoin(a.ints(), ", "), "]"));
        }
      }
      for (const onnx::GraphProto* sub : Subgraphs(a)) {
        REPLICAD_RETURN_IF_ERROR(CheckWindowAttributes(*sub));
      }
    }
  }
  return absl::OkStatus();
}

// Bytes per element of an ONNX tensor type stored as raw_data; 0 for the
// types raw_data cannot hold (strings) and unknown ones.
size_t OnnxElementSize(int data_type) {
  switch (data_type) {
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::BOOL:
      return 1;
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32:
      return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::COMPLEX64:
      return 8;
    case onnx::TensorProto::COMPLEX128:
      return 16;
    default:
      return 0;
  }
}

// ONNX's shape inference (libonnx 1.12) copies a tensor's raw_data into a
// vector sized by raw_data's whole elements: 1 byte for an INT64 left it
// empty and wrote through a null pointer. Every tensor it may read (the
// initializers, and tensor attributes such as a Constant's value, in every
// graph) must hold exactly what its dims and type say.
absl::Status CheckRawData(const onnx::TensorProto& t, const std::string& what) {
  const size_t element = OnnxElementSize(t.data_type());
  if (!t.has_raw_data() || element == 0) return absl::OkStatus();
  uint64_t bytes = element;
  for (int64_t d : t.dims()) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": dims [", absl::StrJoin(t.dims(), ", "),
                       "] expected non-negative, with a byte size that fits in 64 bits"));
    }
  }
  if (t.raw_data().size() == bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", onnx::TensorProto::DataType_Name(t.data_type()), " dims [",
                   absl::StrJoin(t.dims(), ", "), "] expected ", bytes,
                   " bytes of raw_data, received ", t.raw_data().size()));
}

absl::Status CheckTensorData(const onnx::GraphProto& g) {
  for (const onnx::TensorProto& init : g.initializer()) {
    REPLICAD_RETURN_IF_ERROR(CheckRawData(init, absl::StrCat("initializer '", init.name(), "'")));
  }
  for (int n = 0; n < g.node_size(); ++n) {
    const onnx::NodeProto& node = g.node(n);
    const std::string name =
        node.name().empty() ? absl::StrCat(node.op_type(), "_", n) : node.name();
    for (const onnx::AttributeProto& a : node.attribute()) {
      const std::string what = absl::StrCat("node '", name, "' attribute '", a.name(), "'");
      if (a.has_t()) {
        REPLICAD_RETURN_IF_ERROR(CheckRawData(a.t(), what));
      }
      for (const onnx::TensorProto& t : a.tensors()) {
        REPLICAD_RETURN_IF_ERROR(CheckRawData(t, what));
      }
      for (const onnx::GraphProto* sub : Subgraphs(a)) {
        REPLICAD_RETURN_IF_ERROR(CheckTensorData(*sub));
      }
    }
  }
  return absl::OkStatus();
}

bool IsDefaultDomainGemm(const onnx::NodeProto& node) {
  return node.op_type() == "Gemm" && (node.domain().empty() || node.domain() == "ai.onnx");
}

bool AttributeHoldsGemm(const onnx::AttributeProto& a);

// Whether `g`, or a graph one of its nodes holds, has a Gemm.
bool GraphHasGemm(const onnx::GraphProto& g) {
  for (const onnx::NodeProto& node : g.node()) {
    if (IsDefaultDomainGemm(node)) return true;
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (AttributeHoldsGemm(a)) return true;
    }
  }
  return false;
}

bool AttributeHoldsGemm(const onnx::AttributeProto& a) {
  const std::vector<const onnx::GraphProto*> graphs = Subgraphs(a);
  return std::any_of(graphs.begin(), graphs.end(),
                     [](const onnx::GraphProto* sub) { return GraphHasGemm(*sub); });
}

// The rank of every value of `g` whose shape the graph states.
std::map<std::string, int> StatedRanks(const onnx::GraphProto& g) {
  std::map<std::string, int> rank;
  for (const auto& init : g.initializer()) rank[init.name()] = init.dims_size();
  for (const auto* infos : {&g.input(), &g.value_info(), &g.output()}) {
    for (const onnx::ValueInfoProto& info : *infos) {
      const auto& type = info.type();
      if (type.has_tensor_type() && type.tensor_type().has_shape() && !rank.count(info.name())) {
        rank[info.name()] = type.tensor_type().shape().dim_size();
      }
    }
  }
  return rank;
}

// ONNX's Conv and ConvTranspose shape inference (libonnx 1.12) reads as many
// kernel dims from W as X has spatial dims without comparing their ranks: a
// W of rank 4 under an X of rank 3 read past W's dims and killed the process
// (SIGSEGV). So the ranks a graph states are compared before ONNX looks, in
// every graph (a subgraph sees its own ranks and the outer ones).
absl::Status CheckConvRanks(const onnx::GraphProto& g, std::map<std::string, int> ranks) {
  for (const auto& [name, rank] : StatedRanks(g)) ranks[name] = rank;
  for (int n = 0; n < g.node_size(); ++n) {
    const onnx::NodeProto& node = g.node(n);
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    if (default_domain && (node.op_type() == "Conv" || node.op_type() == "ConvTranspose") &&
        node.input_size() >= 2) {
      auto x = ranks.find(node.input(0));
      auto w = ranks.find(node.input(1));
      if (x != ranks.end() && w != ranks.end() && x->second != w->second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", node.name().empty() ? absl::StrCat(node.op_type(), "_", n) : node.name(),
            "' (", node.op_type(), "): input 1 'W' must have the rank of input 0 'X' (", x->second,
            "), received rank ", w->second));
      }
    }
    for (const onnx::AttributeProto& a : node.attribute()) {
      for (const onnx::GraphProto* sub : Subgraphs(a)) {
        REPLICAD_RETURN_IF_ERROR(CheckConvRanks(*sub, ranks));
      }
    }
  }
  return absl::OkStatus();
}

// Below opset 7 PRelu's 1-D slope of C elements was one slope per channel
// (dim 1 of X); from opset 7 it broadcasts from the right like any operand,
// and ONNX's version converter leaves it as it is. So a slope initializer of
// [C] read by that PRelu alone becomes [C, 1, ...] before the conversion
// (shapes are inferred by then). Others are left to broadcast as they will.
void ReshapeOldPReluSlopes(onnx::GraphProto& g) {
  const std::map<std::string, int> rank = StatedRanks(g);
  std::map<std::string, int> readers;
  for (const onnx::NodeProto& node : g.node()) {
    for (const std::string& input : node.input()) ++readers[input];
  }
  for (const onnx::NodeProto& node : g.node()) {
    if (!(node.domain().empty() || node.domain() == "ai.onnx") || node.op_type() != "PRelu" ||
        node.input_size() != 2 || readers[node.input(1)] != 1) {
      continue;
    }
    auto x_rank = rank.find(node.input(0));
    if (x_rank == rank.end() || x_rank->second < 3) continue;
    for (onnx::TensorProto& slope : *g.mutable_initializer()) {
      if (slope.name() != node.input(1) || slope.dims_size() != 1 || slope.dims(0) == 1) continue;
      for (int d = 2; d < x_rank->second; ++d) slope.add_dims(1);
      // Old IR versions list initializers among the graph's inputs too.
      for (onnx::ValueInfoProto& input : *g.mutable_input()) {
        if (input.name() != slope.name() || !input.type().tensor_type().has_shape()) continue;
        onnx::TensorShapeProto* shape =
            input.mutable_type()->mutable_tensor_type()->mutable_shape();
        for (int d = 2; d < x_rank->second; ++d) shape->add_dim()->set_dim_value(1);
      }
    }
  }
}

// Shape inference ahead of ONNX's version converter, which needs shapes.
// Below opset 7, ONNX's Gemm shape inference and its Gemm adapter from opset
// 6 to 7 (libonnx 1.12) read dims 0 and 1 of A and B without looking at their
// rank, and a vector index out of range there is a crash, not an exception.
// So shapes are inferred up to each Gemm first, and its A and B must be
// matrices whose rank the model states or implies before ONNX looks at the
// Gemm itself. A Gemm inside a subgraph cannot be checked that way and is
// refused below opset 7.
absl::Status InferShapesForConversion(onnx::ModelProto& model, int opset) {
  onnx::GraphProto& g = *model.mutable_graph();
  if (opset >= 7) {
    onnx::shape_inference::InferShapes(model);
    return absl::OkStatus();
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  nodes.Swap(g.mutable_node());
  for (int n = 0; n < nodes.size(); ++n) {
    onnx::NodeProto& node = nodes[n];
    const std::string name =
        node.name().empty() ? absl::StrCat(node.op_type(), "_", n) : node.name();
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (AttributeHoldsGemm(a)) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", name, "' (", node.op_type(), "): attribute '", a.name(),
                         "' holds a Gemm, which replicad converts from opset ", opset, " to ",
                         kMinOpset, " only in the main graph"));
      }
    }
    if (IsDefaultDomainGemm(node)) {
      onnx::shape_inference::InferShapes(model);  // The nodes before this one.
      const std::map<std::string, int> rank = StatedRanks(g);
      for (int i = 0; i < std::min(node.input_size(), 2); ++i) {
        auto it = rank.find(node.input(i));
        if (it != rank.end() && it->second == 2) continue;
        return absl::InvalidArgumentError(
            absl::StrCat("node '", name, "' (Gemm): input '", node.input(i),
                         "' expected a matrix of known rank 2 (converting opset ", opset, " to ",
                         kMinOpset, " needs it), received ",
                         it == rank.end() ? "no shape" : absl::StrCat("rank ", it->second)));
      }
    }
    g.add_node()->Swap(&node);
  }
  onnx::shape_inference::InferShapes(model);
  return absl::OkStatus();
}

// ONNX's checker, shape inference and version converter (libonnx 1.12)
// share its operator schema registry without a lock: TSan saw two models
// loading at once race inside check_node and OpSchema::Verify. One import at
// a time runs them (a small part of a load; the plans are most of it).
absl::Mutex& OnnxLibraryMutex() {
  static absl::Mutex* const mu = new absl::Mutex;
  return *mu;
}

// ONNX's own checks of `model`, its conversion to kMinOpset where older, and
// its shape inference.
absl::Status CheckAndConvert(onnx::ModelProto& model, const std::string& source) {
  absl::MutexLock lock(&OnnxLibraryMutex());
  const int old_opset = DefaultDomainOpset(model);
  if (old_opset > 0 && old_opset < kMinOpset) {
    // The converter trusts its input; the checker goes first.
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ONNX rejects the model: ", e.what()));
    }
  }
  try {
    // Older models are brought to opset 11 by ONNX's own version converter,
    // so the operators only ever see the semantics of opsets 11 to 17.
    if (old_opset > 0 && old_opset < kMinOpset) {
      // Some adapters (Gemm's) need shapes.
      if (absl::Status s = InferShapesForConversion(model, old_opset); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
      }
      if (old_opset < 7) ReshapeOldPReluSlopes(*model.mutable_graph());
      const std::set<std::string> old_resizes = OldResizeOutputs(model.graph());
      model = onnx::version_conversion::ConvertVersion(model, kMinOpset);
      KeepOldResizeCoordinates(model.mutable_graph(), old_resizes);
      // Opset 11 came with IR version 6; the converter keeps the old IR
      // version, under which its new initializers (e.g. Pad's pads) would
      // have to be graph inputs too.
      if (model.ir_version() < 6) model.set_ir_version(6);
    }
  } catch (const std::exception& e) {
    return absl::UnimplementedError(absl::StrCat(source, ": cannot convert the model from opset ",
                                                 DefaultDomainOpset(model), " to ", kMinOpset, ": ",
                                                 e.what()));
  }
  try {
    onnx::checker::check_model(model);
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ONNX rejects the model: ", e.what()));
  }
  return absl::OkStatus();
}

// The import of a parsed model (consumed: its weights move into the Model).
absl::StatusOr<std::shared_ptr<const Model>> LoadOnnxProto(onnx::ModelProto model,
                                                           const std::string& name,
                                                           const std::string& source,
                                                           const OnnxImportOptions& options) {
  for (absl::Status s : {CheckOpsetImports(model), CheckOutputsDefined(model.graph()),
                         CheckWindowAttributes(model.graph()), CheckTensorData(model.graph()),
                         CheckConvRanks(model.graph(), {})}) {
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  REPLICAD_RETURN_IF_ERROR(CheckAndConvert(model, source));
  if (absl::Status s = FlattenIfBranches(model.mutable_graph()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  if (absl::Status s = WidenHalfFloats(model.mutable_graph()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  if (absl::Status s = ExpandQuantizedContribOps(model.mutable_graph()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  NormalizeTrainingForms(model.mutable_graph());
  NarrowDoubleConstantsCastToFloat(model.mutable_graph());
  LiftOneDimensionalWindows(model.mutable_graph(), DefaultDomainOpset(model),
                            StatedRanks(model.graph()));
  absl::StatusOr<Graph> graph = ConvertGraph(model, options);
  if (graph.ok() && options.optimize) {
    if (absl::Status s = OptimizeForInference(&*graph); !s.ok()) graph = s;
  }
  if (graph.ok()) MarkComputePrecision(&*graph, options.precision);
  if (!graph.ok()) {
    return absl::Status(graph.status().code(),
                        absl::StrCat(source, ": ", graph.status().message()));
  }
  return std::make_shared<const Model>(name, source, *std::move(graph));
}

absl::Status NotOnnx(const std::string& source) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": not an ONNX model (cannot parse)"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> LoadOnnxBytes(const std::string& bytes,
                                                           const std::string& name,
                                                           const std::string& source,
                                                           const OnnxImportOptions& options) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) return NotOnnx(source);
  return LoadOnnxProto(std::move(model), name, source, options);
}

absl::StatusOr<std::shared_ptr<const Model>> LoadOnnxFile(const std::string& path,
                                                          const std::string& name,
                                                          const OnnxImportOptions& options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
  // Parsed from the stream: the file's bytes are never all in memory beside
  // the parsed model (reading them whole first held the weights three times).
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&file)) return NotOnnx(path);
  return LoadOnnxProto(std::move(model), name, path, options);
}

}  // namespace replicad
