#ifndef REPLICAD_CORE_TRAIN_TRAINING_GRAPH_H_
#define REPLICAD_CORE_TRAIN_TRAINING_GRAPH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
};

// Builds the training graph of `model` (imported without inference
// optimisations). FailedPrecondition when the loss output is not a model
// output, or nothing trainable feeds it; Unimplemented naming the node and its
// op for any node on the path to the loss that has no gradient rule.
absl::StatusOr<TrainingGraph> BuildTrainingGraph(const Graph& model, const LossSpec& loss);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_GRAPH_H_
