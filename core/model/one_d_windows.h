#ifndef REPLICAD_CORE_MODEL_ONE_D_WINDOWS_H_
#define REPLICAD_CORE_MODEL_ONE_D_WINDOWS_H_

#include <map>
#include <string>

#include "onnx/onnx_pb.h"

namespace replicad {

// Audio and sequence models slide 1-D windows: Conv, ConvTranspose, MaxPool
// and AveragePool over X [N, C, L]. The engine's kernels (oneDNN's and
// cuDNN's, with their layouts, Winograd and gradients) are 2-D, and a 1-D
// window is the 2-D one of height 1, so each such node becomes
//   Unsqueeze(X, axis 2) -> the 2-D node -> Squeeze(axis 2)
// with W (Conv, ConvTranspose) unsqueezed alike, and its window attributes
// given a leading 1 (kernel_shape, strides, dilations, output_shape) or 0
// (output_padding, pads). The graph computes the same values; its inputs,
// outputs and initializers keep their names and shapes, so checkpoints and
// gradients are those of the 1-D model. A node is 1-D when its kernel_shape
// has one value, or else its W or X has the rank of one (rank 3 in
// `ranks`, a value's stated rank). MaxPool with an Indices output is left as
// it is (refused later). `opset` is the default domain's (axes are an input
// of Unsqueeze and Squeeze from 13).
void LiftOneDimensionalWindows(onnx::GraphProto* graph, int opset,
                               const std::map<std::string, int>& ranks);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ONE_D_WINDOWS_H_
