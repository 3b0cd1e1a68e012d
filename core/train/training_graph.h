#ifndef REPLICAD_CORE_TRAIN_TRAINING_GRAPH_H_
#define REPLICAD_CORE_TRAIN_TRAINING_GRAPH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/compute_precision.h"
#include "core/model/graph.h"

namespace replicad {

struct LossSpec {
  enum class Kind { kSoftmaxCrossEntropy, kMeanSquaredError };
  Kind kind = Kind::kSoftmaxCrossEntropy;
  std::string output;  // The model output the loss applies to.
  // Softmax cross-entropy: int64 labels [N] or float32 probabilities [N, C];
  // mean squared error: float32 shaped like the output.
  DType target_dtype = DType::kInt64;
};

// A model's forward pass, its loss and the backward pass as one graph, run by
// one plan per slot and slice size.
//
// Inputs: the model's inputs (model order), then `targets`, then the trained
// parameters (float32 initializers the loss is differentiated by; others,
// such as Clip's bounds, stay constants), which are inputs
// rather than constants because they change every step.
// Outputs: loss_sum (float32 scalar: the sum of the slice's per-sample
// losses), then `correct` (float32 scalar count) when the loss classifies,
// then dloss_sum/dparameter for each parameter, in parameter order, then the
// updated value of each buffer (running statistics of BatchNormalization in
// training form, which are inputs after the parameters). Sums,
// not means: the reducer divides by the global batch, so uneven splits are exact.
struct TrainingGraph {
  Graph graph;
  // The model's initializer value indices that became parameters, in order.
  std::vector<int> parameters;
  // Initializers a step updates without the optimizer (running statistics),
  // in buffer order.
  std::vector<int> buffers;
  bool classification = false;
  int num_model_inputs = 0;
  // graph.nodes[first_backward_node] starts the backward pass (the forward
  // pass and the loss come before it).
  int first_backward_node = 0;
  // The loss node's output holding the gradient it seeds (of the loss's input).
  int loss_gradient = -1;
  // The loss node's first input: the logits (softmax cross-entropy, its
  // last dim the classes) or the predictions (mean squared error).
  int loss_input = -1;
  // fp16: the float32 scalar graph input (the last) that gradient is
  // multiplied by, the loss scale (float16_products.h); -1 otherwise.
  int loss_scale_input = -1;
};

// Types of a graph's values by index, where known (ExecutionPlan::value_types).
using ValueTypes = std::vector<std::optional<TensorType>>;

// Builds the training graph of `model` (imported without inference
// optimisations). FailedPrecondition when the loss output is not a model
// output, or nothing trainable feeds it; Unimplemented naming the node and its
// op for any node on the path to the loss that has no gradient rule. The
// ranks some rules need (MatMul's, LayerNormalization's) and the model does
// not declare are read from UndeclaredTypes on the CPU backend's host folding
// device.
// With `precision` bf16, the forward pass's Conv, Gemm and MatMul nodes
// that read a parameter are marked to compute so (compute_precision.h), and
// the MatMul and Gemm nodes their gradient rules emit too; with
// fp16 they and the products of their gradients read and write float16 values
// and the loss's gradient is scaled (float16_products.h); with tf32 every
// product, forward and backward, is marked (TF32 on CUDA slots).
absl::StatusOr<TrainingGraph> BuildTrainingGraph(
    const Graph& model, const LossSpec& loss,
    ComputePrecision precision = ComputePrecision::kFloat32);

// The types of `model`'s values as a plan at batch 1 (every dim the model
// leaves open set to 1) computes them on `host`, a device in host memory
// (whose kernels read the graph's initializers in place).
absl::StatusOr<ValueTypes> InferForwardTypes(const Graph& model, Device& host);

// InferForwardTypes where the model leaves the shape of some node's output
// undeclared (ONNX's shape inference stops at shapes computed from values, as
// in exported transformers); nullopt when it declares every one, `host` is
// null or the inference fails (rules that need a missing rank then name the
// node).
std::optional<ValueTypes> UndeclaredTypes(const Graph& model, Device* host);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_GRAPH_H_
