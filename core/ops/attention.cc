#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/ops/attention_attributes.h"
#include "core/ops/broadcast.h"
#include "core/ops/index_map.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

Shape BatchDims(const Shape& matrix_shape) {
  return Shape(matrix_shape.begin(), matrix_shape.end() - 2);
}

// Where each entry of `batch` (row-major) finds its matrix in a tensor whose
// batch dims are `dims` with `strides` (both of batch's rank; a dim of 1 is
// broadcast).
std::vector<int64_t> BatchOffsets(const Shape& batch, const Shape& dims,
                                  const std::vector<int64_t>& strides) {
  const size_t rank = batch.size();
  std::vector<int64_t> offsets(static_cast<size_t>(NumElements(batch)), 0);
  std::vector<int64_t> index(rank, 0);
  for (size_t b = 0; b < offsets.size(); ++b) {
    int64_t offset = 0;
    for (size_t i = 0; i < rank; ++i) offset += dims[i] == 1 ? 0 : index[i] * strides[i];
    offsets[b] = offset;
    for (size_t i = rank; i-- > 0;) {
      if (++index[i] < batch[i]) break;
      index[i] = 0;
    }
  }
  return offsets;
}

// A matrix-stack operand as the node sees it: its shape after its perm, and
// the strides of that shape in the tensor as it lies.
struct Strided {
  Shape shape;
  std::vector<int64_t> strides;
};

// Input `input` ('name') read through its perm attribute (kAttentionPerms).
absl::StatusOr<Strided> ReadThroughPerm(const KernelSpec& spec, int input, const char* name,
                                        const Shape& source) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                            spec.attributes->GetInts(kAttentionPerms[input], {}));
  const std::vector<int64_t> source_strides = RowMajorStrides(source);
  if (perm.empty()) return Strided{source, source_strides};
  const int64_t rank = static_cast<int64_t>(source.size());
  if (!IsPermutation(perm, rank) || (perm[rank - 1] != rank - 1 && perm[rank - 2] != rank - 1)) {
    return NodeError(spec, absl::StrCat("attribute '", kAttentionPerms[input], "' of input ", input,
                                        " '", name, "' must permute its ", rank,
                                        " dims keeping the last one among the last two, "
                                        "received [",
                                        absl::StrJoin(perm, ","), "]"));
  }
  Strided strided;
  for (int64_t i = 0; i < rank; ++i) {
    strided.shape.push_back(source[perm[i]]);
    strided.strides.push_back(source_strides[perm[i]]);
  }
  return strided;
}

// `matrix` read once per entry of `batch` (the output's batch dims).
MatrixView ViewOf(const Strided& matrix, const Shape& batch) {
  const size_t pad = batch.size() + 2 - matrix.shape.size();
  Shape dims(pad, 1);
  std::vector<int64_t> strides(pad, 0);
  dims.insert(dims.end(), matrix.shape.begin(), matrix.shape.end() - 2);
  strides.insert(strides.end(), matrix.strides.begin(), matrix.strides.end() - 2);
  MatrixView view;
  view.batch_offsets = BatchOffsets(batch, dims, strides);
  view.row_stride = matrix.strides[matrix.strides.size() - 2];
  view.col_stride = matrix.strides.back();
  return view;
}

absl::StatusOr<std::vector<AttentionStep>> ReadSteps(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> ints,
                            spec.attributes->GetInts(kAttentionSteps, {}));
  if (ints.size() % 3 != 0) {
    return NodeError(spec, absl::StrCat("attribute '", kAttentionSteps,
                                        "' must hold (kind, operand, condition) triples, "
                                        "received ",
                                        ints.size(), " ints"));
  }
  std::vector<AttentionStep> steps;
  for (size_t i = 0; i < ints.size(); i += 3) {
    AttentionStep step;
    if (ints[i] < 0 || ints[i] > static_cast<int64_t>(AttentionStep::Kind::kFillUnless)) {
      return NodeError(spec, absl::StrCat("step ", i / 3, " has kind ", ints[i],
                                          ", expected 0 (Mul) to 4 (Where, S if true)"));
    }
    step.kind = static_cast<AttentionStep::Kind>(ints[i]);
    const bool fill = step.kind == AttentionStep::Kind::kFillWhere ||
                      step.kind == AttentionStep::Kind::kFillUnless;
    const int64_t inputs = static_cast<int64_t>(spec.inputs.size());
    auto valid = [&](int64_t input) { return input >= 3 && input < inputs; };
    if (!valid(ints[i + 1]) || (fill ? !valid(ints[i + 2]) : ints[i + 2] != -1)) {
      return NodeError(spec, absl::StrCat("step ", i / 3, " names inputs ", ints[i + 1], " and ",
                                          ints[i + 2], "; expected an operand in [3, ", inputs,
                                          ") and ", fill ? "a condition there too" : "-1"));
    }
    step.operand = static_cast<int>(ints[i + 1]);
    step.condition = static_cast<int>(ints[i + 2]);
    steps.push_back(step);
  }
  return steps;
}

// An operand or a condition, checked: its last two dims broadcast into the
// scores' [M, N] without enlarging them; its batch dims join `batch`
// (ONNX's Mul, Add and Where broadcast both ways).
absl::Status CheckStepInput(const KernelSpec& spec, int input, DType dtype, int64_t m, int64_t n,
                            Shape* batch) {
  const std::string name = absl::StrCat("step input ", input);
  REPLICAD_ASSIGN_OR_RETURN(TensorType type, RequiredInput(spec, input, name));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, input, name, type, {dtype}));
  const Shape padded = PadToRank(type.shape, std::max<size_t>(type.shape.size(), 2));
  const int64_t rows = padded[padded.size() - 2];
  const int64_t cols = padded.back();
  std::optional<Shape> joined = BroadcastShapes(*batch, BatchDims(padded));
  if ((rows != 1 && rows != m) || (cols != 1 && cols != n) || !joined.has_value()) {
    return NodeError(spec,
                     absl::StrCat("input ", input, " must broadcast to the scores [",
                                  absl::StrJoin(*batch, ","), batch->empty() ? "" : ",", m, ",", n,
                                  "] without enlarging their last two dims, received ",
                                  TensorTypeToString(type)));
  }
  *batch = *std::move(joined);
  return absl::OkStatus();
}

// Input `input` (checked), read once per entry of `batch` (the output's
// batch dims): every dim of 1 broadcast.
AttentionOperand OperandLayout(const KernelSpec& spec, int input, const Shape& batch) {
  const Shape padded = PadToRank(spec.inputs[input]->shape, batch.size() + 2);
  std::vector<int64_t> strides = RowMajorStrides(padded);
  for (size_t i = 0; i < padded.size(); ++i) {
    if (padded[i] == 1) strides[i] = 0;
  }
  return AttentionOperand{input, ViewOf(Strided{padded, strides}, batch)};
}

// Y [batch..., M, D], written as it is or through the output's perm
// (Transpose(Y, perm)): the output's shape and Y's view of it.
absl::Status SetOutput(const KernelSpec& spec, const Shape& batch, AttentionLayout* layout) {
  Shape y = batch;
  y.push_back(layout->m);
  y.push_back(layout->d);
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                            spec.attributes->GetInts(kAttentionPerms[3], {}));
  const int64_t rank = static_cast<int64_t>(y.size());
  if (perm.empty()) {
    layout->output_shape = y;
    layout->output = ViewOf(Strided{y, RowMajorStrides(y)}, batch);
    return absl::OkStatus();
  }
  if (!IsPermutation(perm, rank) || perm[rank - 1] != rank - 1) {
    return NodeError(spec,
                     absl::StrCat("attribute '", kAttentionPerms[3], "' must permute the ", rank,
                                  " dims of ", ShapeToString(y), " keeping the last, received [",
                                  absl::StrJoin(perm, ","), "]"));
  }
  layout->output_shape.clear();
  for (int64_t i = 0; i < rank; ++i) layout->output_shape.push_back(y[perm[i]]);
  // Y's dim perm[i] is the output's dim i.
  const std::vector<int64_t> output_strides = RowMajorStrides(layout->output_shape);
  std::vector<int64_t> y_strides(rank);
  for (int64_t i = 0; i < rank; ++i) y_strides[perm[i]] = output_strides[i];
  layout->output = ViewOf(Strided{y, y_strides}, batch);
  return absl::OkStatus();
}

}  // namespace

void WriteAttentionSteps(const std::vector<AttentionStep>& steps, Attributes* attributes) {
  std::vector<int64_t> ints;
  for (const AttentionStep& step : steps) {
    ints.push_back(static_cast<int64_t>(step.kind));
    ints.push_back(step.operand);
    ints.push_back(step.condition);
  }
  attributes->Set(kAttentionSteps, std::move(ints));
}

absl::StatusOr<AttentionLayout> ParseAttentionLayout(const KernelSpec& spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<AttentionStep> steps, ReadSteps(spec));
  TensorType matrices[3];
  Strided views[3];
  const char* const kNames[3] = {"Q", "Kt", "V"};
  for (int i = 0; i < 3; ++i) {
    REPLICAD_ASSIGN_OR_RETURN(matrices[i], RequiredInput(spec, i, kNames[i]));
    REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, i, kNames[i], matrices[i], {DType::kFloat32}));
    if (matrices[i].shape.size() < 2) {
      return NodeError(
          spec, absl::StrCat("input ", i, " '", kNames[i], "' must have rank >= 2, received ",
                             TensorTypeToString(matrices[i])));
    }
    REPLICAD_ASSIGN_OR_RETURN(views[i], ReadThroughPerm(spec, i, kNames[i], matrices[i].shape));
  }
  const Shape& q = views[0].shape;
  const Shape& kt = views[1].shape;
  const Shape& v = views[2].shape;
  AttentionLayout layout;
  layout.m = q[q.size() - 2];
  layout.k = q.back();
  layout.n = kt.back();
  layout.d = v.back();
  if (kt[kt.size() - 2] != layout.k || v[v.size() - 2] != layout.n) {
    return NodeError(spec,
                     absl::StrCat("inputs must chain as [.., M, K] x [.., K, N] x [.., N, D], "
                                  "received Q ",
                                  ShapeToString(q), ", Kt ", ShapeToString(kt), " and V ",
                                  ShapeToString(v), " (after their perms)"));
  }
  std::optional<Shape> batch = BroadcastShapes(BatchDims(q), BatchDims(kt));
  if (!batch.has_value()) {
    return NodeError(spec, absl::StrCat("batch dims of Q ", ShapeToString(q), " and Kt ",
                                        ShapeToString(kt), " do not broadcast"));
  }
  for (const AttentionStep& step : steps) {
    REPLICAD_RETURN_IF_ERROR(
        CheckStepInput(spec, step.operand, DType::kFloat32, layout.m, layout.n, &*batch));
    if (step.condition >= 0) {
      REPLICAD_RETURN_IF_ERROR(
          CheckStepInput(spec, step.condition, DType::kBool, layout.m, layout.n, &*batch));
    }
  }
  const std::optional<Shape> output_batch = BroadcastShapes(*batch, BatchDims(v));
  if (!output_batch.has_value()) {
    return NodeError(spec, absl::StrCat("batch dims of the scores [", absl::StrJoin(*batch, ","),
                                        "] and V ", ShapeToString(v), " do not broadcast"));
  }
  layout.batch = NumElements(*output_batch);
  layout.q = ViewOf(views[0], *output_batch);
  layout.kt = ViewOf(views[1], *output_batch);
  layout.v = ViewOf(views[2], *output_batch);
  REPLICAD_RETURN_IF_ERROR(SetOutput(spec, *output_batch, &layout));
  for (const AttentionStep& step : steps) {
    layout.operands.push_back(OperandLayout(spec, step.operand, *output_batch));
    layout.conditions.push_back(step.condition >= 0
                                    ? OperandLayout(spec, step.condition, *output_batch)
                                    : AttentionOperand{-1, MatrixView{}});
  }
  layout.steps = std::move(steps);
  return layout;
}

absl::Status InferAttention(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(AttentionLayout layout, ParseAttentionLayout(*spec));
  spec->outputs = {TensorType{DType::kFloat32, layout.output_shape}};
  return absl::OkStatus();
}

}  // namespace replicad
