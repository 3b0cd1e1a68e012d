#ifndef REPLICAD_CORE_MODEL_NODE_SPEC_H_
#define REPLICAD_CORE_MODEL_NODE_SPEC_H_

#include "core/device/kernel.h"
#include "core/model/graph.h"

namespace replicad {

// The KernelSpec of `node` of a graph of `opset`, before its inputs are
// known: op type, name, opset, attributes (the node's, which must outlive the
// spec) and the number of outputs it declares. Callers add the inputs.
inline KernelSpec NodeSpec(const Node& node, int opset) {
  KernelSpec spec;
  spec.op_type = node.op_type;
  spec.node_name = node.name;
  spec.opset = opset;
  spec.attributes = &node.attributes;
  spec.declared_outputs = static_cast<int>(node.outputs.size());
  return spec;
}

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_NODE_SPEC_H_
