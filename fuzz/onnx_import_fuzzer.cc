// Feeds bytes as an ONNX ModelProto to LoadOnnxBytes (what model files,
// repositories and checkpoints load through): ONNX's parser, version
// converter, checker and shape inference, then replicad's conversion to its
// graph IR and the inference optimizer.
// Asserts: a refusal is InvalidArgument or Unimplemented; a loaded graph
// keeps graph.h's contract (value indices in range, nodes in topological
// order, each value produced once, inputs that are not initializers,
// initializers typed as their values); loading the same bytes without the
// optimizer also succeeds, with the same inputs and outputs (names, dtypes,
// shapes), as graph_optimizer.h promises.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/onnx_import.h"
#include "fuzz/fuzz_check.h"

namespace {

using replicad::fuzz::Violated;

void CheckGraph(const replicad::Graph& g) {
  const int n = static_cast<int>(g.values.size());
  std::vector<bool> defined(n, false);
  for (const auto& [v, tensor] : g.initializers) {
    if (v < 0 || v >= n) Violated("an initializer index out of range");
    if (!(tensor.type() == g.values[v].type)) {
      Violated(absl::StrCat("initializer '", g.values[v].name, "' is typed unlike its value"));
    }
    defined[v] = true;
  }
  for (int v : g.inputs) {
    if (v < 0 || v >= n) Violated("an input index out of range");
    if (g.initializers.count(v)) Violated("an input that is an initializer");
    defined[v] = true;
  }
  for (const replicad::Node& node : g.nodes) {
    for (int v : node.inputs) {
      if (v == replicad::Node::kAbsentInput) continue;
      if (v < 0 || v >= n) Violated(absl::StrCat("node '", node.name, "': input out of range"));
      if (!defined[v]) {
        Violated(absl::StrCat("node '", node.name, "' reads '", g.values[v].name,
                              "' before anything defines it"));
      }
    }
    for (int v : node.outputs) {
      if (v < 0 || v >= n) Violated(absl::StrCat("node '", node.name, "': output out of range"));
      if (defined[v]) Violated(absl::StrCat("'", g.values[v].name, "' is defined twice"));
      defined[v] = true;
    }
  }
  for (int v : g.outputs) {
    if (v < 0 || v >= n || !defined[v]) Violated("a graph output nothing defines");
  }
}

bool SameSpecs(const std::vector<replicad::TensorSpec>& a,
               const std::vector<replicad::TensorSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || !(a[i].type == b[i].type)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(bytes, "fuzz", "fuzz.onnx");
  if (!model.ok()) {
    const absl::StatusCode code = model.status().code();
    if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kUnimplemented) {
      Violated(absl::StrCat("LoadOnnxBytes failed with ", model.status().ToString()));
    }
    return 0;
  }
  CheckGraph((*model)->graph());
  OnnxImportOptions plain;
  plain.optimize = false;
  absl::StatusOr<std::shared_ptr<const Model>> unoptimized =
      LoadOnnxBytes(bytes, "fuzz", "fuzz.onnx", plain);
  if (!unoptimized.ok()) {
    Violated(absl::StrCat("loads optimized but not without the optimizer: ",
                          unoptimized.status().ToString()));
  }
  CheckGraph((*unoptimized)->graph());
  if (!SameSpecs((*model)->inputs(), (*unoptimized)->inputs()) ||
      !SameSpecs((*model)->outputs(), (*unoptimized)->outputs())) {
    Violated("the optimizer changed the model's inputs or outputs");
  }
  return 0;
}
