#ifndef REPLICAD_CORE_MODEL_OLD_RESIZE_COORDINATES_H_
#define REPLICAD_CORE_MODEL_OLD_RESIZE_COORDINATES_H_

#include <set>
#include <string>

#include "onnx/onnx_pb.h"

namespace replicad {

// ONNX's version converter turns Upsample (opsets 7-9) and Resize-10 into
// Resize-11 without saying how their coordinates map (x_in = x_out / scale,
// nearest rounding down), so Resize-11's defaults (half_pixel,
// round_prefer_floor) would compute something else. The outputs of such
// nodes are noted before the conversion and their Resize-11 told after it.

// The outputs of the default domain's Upsample and Resize nodes of `g`.
std::set<std::string> OldResizeOutputs(const onnx::GraphProto& g);

// The converted Resize nodes writing one of `outputs` told the old
// coordinates (asymmetric, nearest rounding down) where they do not say.
void KeepOldResizeCoordinates(onnx::GraphProto* g, const std::set<std::string>& outputs);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_OLD_RESIZE_COORDINATES_H_
