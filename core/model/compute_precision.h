#ifndef REPLICAD_CORE_MODEL_COMPUTE_PRECISION_H_
#define REPLICAD_CORE_MODEL_COMPUTE_PRECISION_H_

#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/graph.h"

namespace replicad {

// The precision a float32 model's products are computed in (`--precision`, a
// model's config.pbtxt parameter `precision`). The interface stays float32.
//  - kFloat32: everything in float32 (the default).
//  - kBFloat16: the convolutions and the matrix products against weights
//    (Conv, Gemm, MatMul whose second operand is an initializer) read their
//    input and weights as bfloat16 and accumulate in float32, as ONNX
//    Runtime's and PyTorch's autocast to bfloat16 do, and write float32
//    (bfloat16 between two convolutions: kOutputPrecisionAttribute below); everything else
//    (softmax, normalisation statistics, reductions, element-wise ops, the
//    fused attention) stays float32. On CPU slots this is oneDNN's bf16
//    (AVX512_BF16 dot products, AMX tiles where the CPU has them); a CPU
//    without AVX-512 computes float32 and says so once in the log.
//  - kFloat16: serving marks the products kBFloat16 marks; CUDA slots
//    compute them on tensor cores from operands rounded to float16, float32
//    sums (cuBLAS's FAST_16F, cuDNN's conversion to float16), as ONNX Runtime's
//    and TensorRT's fp16 modes do, and a chain of convolutions hands its
//    values over in float16 (kOutputPrecisionAttribute); CPU slots compute
//    float32 (their oneDNN has no float16 products) and say so once in the log. Training
//    (core/train/float16_products.h): the same products read and write
//    values rounded to float16, with dynamic loss scaling, as
//    torch.autocast(float16) with GradScaler trains.
//  - kTensorFloat32: every convolution and matrix product (Conv, its
//    gradients, Gemm, MatMul, whatever its operands) may use TF32 tensor
//    cores on CUDA slots (10-bit mantissas in the products, float32 sums),
//    as PyTorch's allow_tf32 flags and the daemon-wide --tf32 do, for this
//    model only. CPUs have no TF32: CPU slots compute float32, as PyTorch's
//    flags leave CPU work unchanged.
enum class ComputePrecision { kFloat32, kBFloat16, kFloat16, kTensorFloat32 };

// Every precision, in the enum's order (for metrics that label each).
inline constexpr ComputePrecision kComputePrecisions[] = {
    ComputePrecision::kFloat32, ComputePrecision::kBFloat16, ComputePrecision::kFloat16,
    ComputePrecision::kTensorFloat32};

// A precision, of serving or training: "fp32", "bf16", "fp16" or "tf32"
// (also "float32", "bfloat16", "float16", "tensorfloat32"); anything else
// InvalidArgument naming `field`, the expected and the received value.
absl::StatusOr<ComputePrecision> ParseComputePrecision(absl::string_view text,
                                                       absl::string_view field);
// "fp32", "bf16", "fp16", "tf32". (Inline: the CUDA backend, which links no
// model library, names its products' math by it.)
inline absl::string_view ComputePrecisionName(ComputePrecision precision) {
  switch (precision) {
    case ComputePrecision::kBFloat16:
      return "bf16";
    case ComputePrecision::kFloat16:
      return "fp16";
    case ComputePrecision::kTensorFloat32:
      return "tf32";
    case ComputePrecision::kFloat32:
      break;
  }
  return "fp32";
}

// The node attribute that tells a kernel its products' precision: "bf16",
// "fp16" (training's marks; the products read float16 Casts), "tf32".
inline constexpr char kPrecisionAttribute[] = "replicad.precision";

// The attribute ("bf16", "fp16") of a bf16 (fp16) Conv whose every reader
// is another such Conv, reading it as its X or as a fused residual's addend:
// its output may stay 16-bit between the two (a kernel writes it so where
// the plan keeps the value in the backend's own layout: the CPU backend for
// bf16, CUDA for both), so that no conversion runs between them and the
// chain's first convolution computes in 16 bits whatever its size, as under
// PyTorch's autocast, whose convolutions write 16-bit values. The residual
// additions then sum onto 16-bit values, as autocast's do. A 2-D MaxPool
// between such Convs (resnet's after its first convolution: floor rounding,
// pads alike on both sides, no dilation) passes the values on: it is marked
// too, its input is marked where the pool's output stays 16-bit, and the
// backends pool in the type the input arrives in (a MaxPool picks one of
// its inputs, so 16 bits lose nothing there).
inline constexpr char kOutputPrecisionAttribute[] = "replicad.output_precision";

// Marks the nodes of `graph` that compute in `precision` (see above), and
// with kBFloat16 and kFloat16 the convolutions whose outputs may stay 16-bit
// (kOutputPrecisionAttribute); kFloat32 marks none. With kTensorFloat32 it
// marks every product (MarkTensorFloat32Products), for a training graph too.
void MarkComputePrecision(Graph* graph, ComputePrecision precision);

// Marks the Conv, Gemm and MatMul nodes among graph->nodes[0, end) whose
// input 1 is one of `weights` (a training graph's parameters, which its
// forward pass's products read as inputs); kFloat32 marks none.
void MarkProducts(Graph* graph, ComputePrecision precision, const std::set<int>& weights,
                  size_t end);

// Marks every Conv, ConvGradData, ConvGradFilter, Gemm and MatMul node of
// `graph` "tf32".
void MarkTensorFloat32Products(Graph* graph);

// The nodes among graph.nodes[0, end) that MarkProducts marks: Conv, Gemm and
// MatMul reading one of `weights` as input 1.
std::vector<int> WeightProducts(const Graph& graph, const std::set<int>& weights, size_t end);

// The precision `graph` was marked with: kFloat32 where no node is marked.
ComputePrecision MarkedComputePrecision(const Graph& graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_COMPUTE_PRECISION_H_
