#ifndef REPLICAD_CORE_OPS_SLICE_PAD_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_SLICE_PAD_ATTRIBUTES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/tensor.h"

namespace replicad {

// Slice and Pad resolved against a concrete input: per input dim, which input
// index each output index reads. Their parameters are value inputs
// (OpDefinition::value_inputs), so both fail with Unimplemented when those are
// not known at plan time, and with InvalidArgument naming the node, the input
// or attribute, the expected and the received value when malformed. Pure
// functions; thread-safe.

// Slice (opset 10+): output index o of input dim d reads starts[d] + o *
// steps[d]. Starts are clamped as ONNX specifies (negative counts from the
// back; out-of-range bounds clamp; negative steps walk backwards).
struct SliceLayout {
  std::vector<int64_t> starts;  // One per input dim; 0 where not sliced.
  std::vector<int64_t> steps;   // One per input dim; 1 where not sliced; never 0.
  Shape output;
};
absl::StatusOr<SliceLayout> ParseSliceLayout(const KernelSpec& spec);

// Pad (opset 11+). A negative pad first crops that many elements from its
// side; the mode then extends the cropped data: constant writes `value`,
// edge repeats the border element and reflect mirrors about the border
// element (numpy's 'reflect', repeating for pads longer than the dim).
// Opset 19's wrap is Unimplemented.
enum class PadMode { kConstant, kReflect, kEdge };
struct PadLayout {
  PadMode mode = PadMode::kConstant;
  std::vector<int64_t> pads_begin;  // One per input dim; negative crops.
  std::vector<int64_t> pads_end;
  Tensor value;  // One element of the data's dtype: constant_value, or 0.
  Shape output;
};
absl::StatusOr<PadLayout> ParsePadLayout(const KernelSpec& spec);

// The input index that output index `out` of a dim of size `dim` reads under
// `layout`'s mode with pads `begin` and `end`, or -1 where constant mode
// writes the value. ParsePadLayout has checked that the modes other than
// constant never extend an empty (cropped) dim.
int64_t PadSourceIndex(PadMode mode, int64_t out, int64_t begin, int64_t end, int64_t dim);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_SLICE_PAD_ATTRIBUTES_H_
