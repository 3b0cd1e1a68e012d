#ifndef REPLICAD_CORE_TRAIN_GRADIENT_RULES_H_
#define REPLICAD_CORE_TRAIN_GRADIENT_RULES_H_

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/model/graph.h"

namespace replicad {

// What a gradient rule sees and does while the training graph is built: the
// forward node, the gradients of its outputs, and a way to append backward
// nodes and hand back the gradients of its inputs. Values are indices into
// the graph being built.
class GradientBuilder {
 public:
  virtual ~GradientBuilder() = default;

  virtual const Node& node() const = 0;
  int input(int i) const { return node().inputs[i]; }
  int output(int i) const { return node().outputs[i]; }
  // dLoss/d(output i), or -1 when the loss does not depend on that output.
  virtual int output_gradient(int i) const = 0;
  // Whether the loss's gradient must reach input i (it is, or depends on, a
  // trained parameter). Rules skip the work for inputs that do not.
  virtual bool wants_gradient(int i) const = 0;

  // Appends `op_type(inputs)` with `num_outputs` new values; returns them.
  virtual std::vector<int> Emit(std::string_view op_type, std::vector<int> inputs, int num_outputs,
                                Attributes attributes = {}) = 0;
  int Emit1(std::string_view op_type, std::vector<int> inputs, Attributes attributes = {}) {
    return Emit(op_type, std::move(inputs), 1, std::move(attributes))[0];
  }
  // A float32 scalar constant.
  virtual int Scalar(float value) = 0;
  // A constant of any type (e.g. an int64 axes input).
  virtual int Constant(Tensor value) = 0;
  // The default domain's opset of the graph (ops moved attributes to inputs
  // over the opsets: ReduceMean's and Unsqueeze's axes).
  virtual int opset() const = 0;
  // The type the model declares for a value (an empty shape where it declares none).
  virtual const TensorType& type(int value) const = 0;
  // Adds `gradient` to dLoss/d(input i).
  virtual void AddInputGradient(int i, int gradient) = 0;
};

// Emits the backward pass of builder.node(). InvalidArgument or
// Unimplemented naming the node for forms it cannot differentiate.
using GradientRule = absl::Status (*)(GradientBuilder& builder);

// The rule for `op_type`, or nullptr when replicad cannot differentiate it yet.
GradientRule FindGradientRule(std::string_view op_type);

// Op types that have a rule, sorted (for messages and the docs).
std::vector<std::string_view> DifferentiableOps();

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_GRADIENT_RULES_H_
