#ifndef REPLICAD_CORE_MODEL_EXPORTER_FORMS_H_
#define REPLICAD_CORE_MODEL_EXPORTER_FORMS_H_

#include "onnx/onnx_pb.h"

namespace replicad {

// The attribute that marks a node the model computes differently in
// training: set on BatchNormalization and Dropout written in their training
// form, read by the training graph builder (core/train), ignored by Predict.
inline constexpr char kTrainingAttribute[] = "replicad.training";

// A model exported in training mode (torch.onnx.export with
// training=TrainingMode.TRAINING) writes BatchNormalization with its
// statistics outputs (opset < 14) or training_mode = 1, and Dropout with a
// constant training_mode input (a bool, a dtype replicad does not compute).
// Where nothing reads the extra outputs, this rewrites such nodes into their
// inference form marked with kTrainingAttribute: Predict then computes them
// as inference (running statistics, identity), as a serving system should,
// and TrainStep in training mode. A bool Constant read only by Dropouts goes.
// Nodes whose extra outputs are read stay as they are (and are refused).
void NormalizeTrainingForms(onnx::GraphProto* graph);

// PyTorch exports a Python float bound (torch.clamp(x, -0.5, 0.5)) as a
// float64 Constant followed by Cast to float32. replicad computes no
// float64, so a float64 Constant that only Casts to float32 read becomes
// float32 (each Cast then converts float32 to float32: the same values).
void NarrowDoubleConstantsCastToFloat(onnx::GraphProto* graph);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_EXPORTER_FORMS_H_
