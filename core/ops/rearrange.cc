// Tile, DepthToSpace and SpaceToDepth (rearrange_attributes.h): shape rules
// and index maps.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/index_map.h"
#include "core/ops/op_util.h"
#include "core/ops/rearrange_attributes.h"
#include "core/ops/shape_rules.h"
#include "core/ops/value_input.h"

namespace replicad {

absl::StatusOr<std::vector<int64_t>> ParseTileRepeats(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 2));
  REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(spec, 0, "input"));
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, Int64ValueInput(spec, 1, "repeats"));
  if (repeats.size() != input.shape.size()) {
    return NodeError(
        spec, absl::StrCat("input 1 'repeats' must hold one count per dim of input 0 "
                           "(",
                           input.shape.size(), "), received [", absl::StrJoin(repeats, ", "), "]"));
  }
  for (int64_t r : repeats) {
    if (r < 0) {
      return NodeError(spec, absl::StrCat("input 1 'repeats' must be >= 0, received [",
                                          absl::StrJoin(repeats, ", "), "]"));
    }
  }
  return repeats;
}

absl::Status InferTile(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ParseTileRepeats(*spec));
  TensorType out = *spec->inputs[0];
  for (size_t d = 0; d < repeats.size(); ++d) {
    // A model file may repeat past what int64 counts (Tile by 2^62).
    if (__builtin_mul_overflow(out.shape[d], repeats[d], &out.shape[d])) {
      return absl::ResourceExhaustedError(
          absl::StrCat(NodeLabel(*spec), ": input 1 'repeats' ", repeats[d], " makes dim ", d,
                       " of ", TensorTypeToString(*spec->inputs[0]), " larger than int64 counts"));
    }
  }
  spec->outputs = {out};
  return absl::OkStatus();
}

absl::StatusOr<IndexMap> TileIndexMap(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(ParseTileRepeats(spec).status());
  const Shape& in = spec.inputs[0]->shape;
  const std::vector<int64_t> strides = RowMajorStrides(in);
  IndexMap map;
  map.output = spec.outputs[0].shape;
  map.offsets.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    map.offsets[d].resize(map.output[d]);
    for (int64_t o = 0; o < map.output[d]; ++o) map.offsets[d][o] = (o % in[d]) * strides[d];
  }
  return map;
}

absl::StatusOr<DepthSpaceAttributes> ParseDepthSpace(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(TensorType input, RequiredInput(spec, 0, "input"));
  if (input.shape.size() != 4) {
    return NodeError(spec, absl::StrCat("input 0 'input' must be [N, C, H, W], received ",
                                        TensorTypeToString(input)));
  }
  DepthSpaceAttributes attributes;
  REPLICAD_ASSIGN_OR_RETURN(attributes.block, IntAttribute(spec, "blocksize", 0));
  const int64_t b = attributes.block;
  if (b < 1) {
    return NodeError(spec, absl::StrCat("attribute 'blocksize' must be >= 1, received ", b));
  }
  if (spec.op_type == "DepthToSpace") {
    REPLICAD_ASSIGN_OR_RETURN(std::string mode, StringAttribute(spec, "mode", "DCR"));
    if (mode != "DCR" && mode != "CRD") {
      return NodeError(spec, absl::StrCat("attribute 'mode' must be \"DCR\" or \"CRD\", received "
                                          "\"",
                                          mode, "\""));
    }
    attributes.crd = mode == "CRD";
    if (input.shape[1] % (b * b) != 0) {
      return NodeError(spec, absl::StrCat("input 0's channels must be a multiple of blocksize^2 (",
                                          b * b, "), received ", TensorTypeToString(input)));
    }
  } else if (input.shape[2] % b != 0 || input.shape[3] % b != 0) {
    return NodeError(spec, absl::StrCat("input 0's height and width must be multiples of "
                                        "blocksize (",
                                        b, "), received ", TensorTypeToString(input)));
  }
  return attributes;
}

absl::Status InferDepthSpace(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(DepthSpaceAttributes attributes, ParseDepthSpace(*spec));
  const int64_t b = attributes.block;
  TensorType out = *spec->inputs[0];
  if (spec->op_type == "DepthToSpace") {
    out.shape = {out.shape[0], out.shape[1] / (b * b), out.shape[2] * b, out.shape[3] * b};
  } else {
    out.shape = {out.shape[0], out.shape[1] * b * b, out.shape[2] / b, out.shape[3] / b};
  }
  spec->outputs = {out};
  return absl::OkStatus();
}

absl::StatusOr<IndexMap> DepthSpaceIndexMap(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(DepthSpaceAttributes attributes, ParseDepthSpace(spec));
  const int64_t b = attributes.block;
  const std::vector<int64_t> s = RowMajorStrides(spec.inputs[0]->shape);
  IndexMap map;
  map.output = spec.outputs[0].shape;
  const Shape& out = map.output;
  map.offsets.resize(4);
  map.offsets[0].resize(out[0]);
  for (int64_t n = 0; n < out[0]; ++n) map.offsets[0][n] = n * s[0];
  for (int d = 1; d < 4; ++d) map.offsets[d].resize(out[d]);
  // Each output dim's part of the input offset is independent of the others,
  // which is what makes these index maps.
  if (spec.op_type == "DepthToSpace") {
    const int64_t c_out = out[1];
    // DCR: input channel (bh * b + bw) * C' + c; CRD: c * b^2 + bh * b + bw.
    const int64_t c_step = attributes.crd ? b * b : 1;
    const int64_t bh_step = attributes.crd ? b : b * c_out;
    const int64_t bw_step = attributes.crd ? 1 : c_out;
    for (int64_t c = 0; c < out[1]; ++c) map.offsets[1][c] = c * c_step * s[1];
    for (int64_t h = 0; h < out[2]; ++h) {
      map.offsets[2][h] = (h % b) * bh_step * s[1] + (h / b) * s[2];
    }
    for (int64_t w = 0; w < out[3]; ++w) {
      map.offsets[3][w] = (w % b) * bw_step * s[1] + (w / b) * s[3];
    }
  } else {
    // Output channel (bh * b + bw) * C + c reads input (c, h * b + bh, w * b + bw).
    const int64_t c_in = spec.inputs[0]->shape[1];
    for (int64_t c = 0; c < out[1]; ++c) {
      const int64_t block = c / c_in;
      map.offsets[1][c] = (c % c_in) * s[1] + (block / b) * s[2] + (block % b) * s[3];
    }
    for (int64_t h = 0; h < out[2]; ++h) map.offsets[2][h] = h * b * s[2];
    for (int64_t w = 0; w < out[3]; ++w) map.offsets[3][w] = w * b * s[3];
  }
  return map;
}

}  // namespace replicad
