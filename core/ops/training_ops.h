#ifndef REPLICAD_CORE_OPS_TRAINING_OPS_H_
#define REPLICAD_CORE_OPS_TRAINING_OPS_H_

#include <string_view>

namespace replicad {

// Operators that only training graphs contain: the backward halves of the
// forward operators and the losses. Their types carry this prefix, which no
// ONNX operator has, so an imported model can never name them.
inline constexpr std::string_view kTrainingOpPrefix = "replicad.";

// replicad.ReluGrad(Y, dY), attribute alpha (default 0) -> dX = dY where
// Y > 0, else alpha * dY (Relu, and LeakyRelu with alpha > 0).
inline constexpr std::string_view kReluGrad = "replicad.ReluGrad";
// replicad.ClipGrad(X, dY, min?, max?) -> dX = dY where min <= X <= max
// (as torch.clamp's backward), else 0. min/max as Clip's inputs (opset 11+).
inline constexpr std::string_view kClipGrad = "replicad.ClipGrad";
// replicad.SoftmaxGrad(Y, dY) and replicad.LogSoftmaxGrad(Y, dY), with the
// forward node's axis and opset: dX = Y * (dY - sum(dY * Y)), and
// dX = dY - exp(Y) * sum(dY), sums along the normalized axis.
inline constexpr std::string_view kSoftmaxGrad = "replicad.SoftmaxGrad";
inline constexpr std::string_view kLogSoftmaxGrad = "replicad.LogSoftmaxGrad";
// replicad.GlobalAveragePoolGrad(X, dY) -> dX = dY / (spatial size), spread
// over each plane.
inline constexpr std::string_view kGlobalAveragePoolGrad = "replicad.GlobalAveragePoolGrad";
// replicad.MaxPoolGrad(X, dY), MaxPool's attributes -> dX: each window's dY
// goes to the first maximum of X in it (row-major order), as PyTorch does.
inline constexpr std::string_view kMaxPoolGrad = "replicad.MaxPoolGrad";
// replicad.ConvGradData(X, W, dY), Conv's attributes -> dX.
inline constexpr std::string_view kConvGradData = "replicad.ConvGradData";
// replicad.ConvGradFilter(X, W, dY), Conv's attributes -> dW, dB ([M]).
inline constexpr std::string_view kConvGradFilter = "replicad.ConvGradFilter";
// replicad.BatchNormTrain(X, scale, B, running_mean, running_var), epsilon,
// momentum -> Y, saved_mean [C], saved_invstd [C], new running_mean, new
// running_var: normalised by the batch's statistics (the whole step's, summed
// across slots through the step's collective: SyncBatchNorm); running
// statistics updated as momentum * old + (1 - momentum) * batch, with the
// unbiased variance, as PyTorch does.
inline constexpr std::string_view kBatchNormTrain = "replicad.BatchNormTrain";
// replicad.BatchNormGrad(X, scale, saved_mean, saved_invstd, dY) -> dX,
// dscale, dB (dscale and dB of this slot's rows; dX from the step's sums).
inline constexpr std::string_view kBatchNormGrad = "replicad.BatchNormGrad";
// replicad.DropoutTrain(X, ratio?), attribute replicad.node_seed -> Y,
// mask_scale (0 or 1 / (1 - ratio) per element): the mask of global row r,
// element e comes from a counter-based generator keyed by (seed, step, node,
// r, e), so a step does not depend on how the batch was split.
inline constexpr std::string_view kDropoutTrain = "replicad.DropoutTrain";
// replicad.AveragePoolGrad(X, dY), AveragePool's attributes -> dX: each
// window's dY divided by the forward divisor (count_include_pad, ceil_mode
// as the forward pass counts them) and spread over the window's elements.
inline constexpr std::string_view kAveragePoolGrad = "replicad.AveragePoolGrad";
// replicad.ConcatGrad(dY, X_0, ..., X_n-1), Concat's axis -> dX_0 .. dX_n-1:
// dY cut back into the inputs' extents (only X_i's types are read).
inline constexpr std::string_view kConcatGrad = "replicad.ConcatGrad";
// replicad.PadGrad(dY, X, pads, constant_value?, axes?), Pad's mode -> dX:
// each element of dY added to the element of X the pad read (none for
// constant mode's fill), so edge and reflect modes accumulate.
inline constexpr std::string_view kPadGrad = "replicad.PadGrad";
// replicad.SliceGrad(dY, X, starts, ends, axes?, steps?), Slice's inputs
// -> dX of X's type: each element of dY at the element of X the slice read,
// 0 elsewhere (a slice reads each element at most once).
inline constexpr std::string_view kSliceGrad = "replicad.SliceGrad";
// replicad.SumToShape(dY, Like) -> dY summed over the dimensions along which
// Like (only its type is read) was broadcast to dY's shape.
inline constexpr std::string_view kSumToShape = "replicad.SumToShape";
// replicad.SoftmaxCrossEntropy(logits [N, C], targets) -> loss_sum [],
// correct [], dlogits [N, C]. Targets are int64 class labels [N] or float
// probabilities [N, C]. loss_sum is the sum over rows of each row's
// cross-entropy of softmax(logits); correct counts rows whose first argmax
// matches the label (or the target's first argmax); dlogits is the gradient
// of loss_sum (not of a mean: the reducer divides by the global batch).
inline constexpr std::string_view kSoftmaxCrossEntropy = "replicad.SoftmaxCrossEntropy";
// replicad.MeanSquaredError(Y [N, ...], T like Y) -> loss_sum [], dY, where
// each row's loss is the mean of its squared differences.
inline constexpr std::string_view kMeanSquaredError = "replicad.MeanSquaredError";
// replicad.AllFinite(X float32, any shape) -> float32 []: 1 when every
// element of X is finite (none NaN or infinite), else 0. Not part of a
// graph either: a trainer runs it on the gradient sums that stay on a
// device (NCCL's), to refuse or skip a step as it does where the host sums.
inline constexpr std::string_view kAllFinite = "replicad.AllFinite";
// replicad.OptimizerStep(G_0, ..., G_{k-1}) (k >= 1), attributes kind ("sgd"
// | "adam" | "rmsprop"), learning_rate, momentum, weight_decay, beta1, beta2,
// epsilon, alpha (floats), nesterov (int 0/1) -> for each j in order: P_j,
// then its state tensors in OptimizerStateNames' order (SGD: momentum_buffer
// if momentum != 0; Adam: exp_avg, exp_avg_sq; RMSprop: momentum_buffer if
// momentum > 0, then square_avg), each of G_j's type: one torch.optim update
// of each parameter P_j by its reduced mean gradient G_j
// (core/ops/optimizer_step.h has the rules and the attribute conversion).
// Several parameters in one node is torch.optim's multi-tensor (`foreach`)
// form: one kernel over all of them instead of a launch each, each element
// updated by the same rule, so the bits do not depend on the grouping.
// Unlike every other op its outputs are read and updated IN PLACE, so it is
// never part of a graph: the optimizer (core/train/optimizer.h) builds and
// runs it directly, with the outputs holding the parameters and their state.
// The update number t (1-based, for Adam's bias corrections) is the
// RunContext's step (Run fails for t < 1, as with a default context). At
// t == 1 the state outputs are not read: they start as zeros, SGD's momentum
// buffer as a copy of the direction, as in PyTorch. CUDA and the CPU backend
// have kernels; the host optimizer updates CPU slots without one.
inline constexpr std::string_view kOptimizerStep = "replicad.OptimizerStep";
// replicad.OptimizerDryRun(for each of k >= 1 parameters in order: G_j, P_j,
// then the kind's state tensors in OptimizerStateNames' order),
// replicad.OptimizerStep's attributes -> k float32 [] flags: flag j is 1 when
// the update OptimizerStep would make (update number t from the RunContext,
// as there) leaves every element of P_j finite, else 0. Nothing is written
// but the flags. An optimizer on a device runs it before the update, as the
// host runs FirstNonFiniteUpdateOnHost, so a learning rate that overflows
// finite gradients is refused before any weight changes.
inline constexpr std::string_view kOptimizerDryRun = "replicad.OptimizerDryRun";

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_TRAINING_OPS_H_
