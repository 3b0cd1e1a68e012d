#ifndef REPLICAD_CORE_TRAIN_TRAINING_CONFIG_H_
#define REPLICAD_CORE_TRAIN_TRAINING_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/device_id.h"
#include "core/model/compute_precision.h"
#include "core/model/model.h"
#include "core/ops/optimizer_step.h"
#include "core/train/trainer_options.h"

namespace replicad {

// How a served model trains, as a client configures it (ConfigureTraining)
// and a checkpoint remembers it. A default-constructed config is PyTorch's
// defaults: softmax cross-entropy on the first output, SGD with
// OptimizerConfig's defaults, all-reduce among the slots, synchronised
// batch statistics, non-finite steps refused, checkpoints only on request.
struct TrainingConfig {
  enum class Loss { kSoftmaxCrossEntropy, kMeanSquaredError };
  enum class Reduction { kAllReduce, kParameterServer };

  Loss loss = Loss::kSoftmaxCrossEntropy;
  std::string output;  // The output the loss applies to; empty: the model's first.
  OptimizerConfig optimizer;
  Reduction reduction = Reduction::kAllReduce;
  std::string ps_device;  // kParameterServer only: the device that reduces and updates.
  bool sync_batch_norm = true;
  uint64_t seed = 0;  // Keys dropout masks with (step, global sample index).
  TrainerOptions::NonFiniteSteps non_finite_steps = TrainerOptions::NonFiniteSteps::kRefuse;
  int64_t checkpoint_every_steps = 0;  // 0: only on request.
  std::string checkpoint_dir;          // Numbered checkpoints go here (under the root).
  // What the forward pass's convolutions and weight products compute in
  // (TrainerOptions::precision).
  ComputePrecision precision = ComputePrecision::kFloat32;
  LossScaling loss_scaling;  // fp16's dynamic loss scaling (loss_scaler.h).
};

// `config` with the model's first output filled in for an empty `output`,
// or InvalidArgument naming the field as the API spells it ("config.output",
// "config.ps_device", "config.checkpoint_every_steps", "config.optimizer.*",
// "config.initial_loss_scale", "config.loss_scale_growth_interval"),
// the expected and the received value. `devices`: where a parameter server
// may be. checkpoint_dir is not resolved here (see CheckpointRoot).
absl::StatusOr<TrainingConfig> CompleteTrainingConfig(TrainingConfig config, const Model& model,
                                                      const std::vector<DeviceInfo>& devices);

// What a trainer for `config` trains with, for targets of `target_dtype`
// (class labels or probabilities pick the loss's form).
TrainerOptions TrainerOptionsOf(const TrainingConfig& config, DType target_dtype);

// The configuration, less where checkpoints go, as a number the ranks of a
// job compare: equal configurations give equal numbers in every process.
uint64_t TrainingFingerprint(const TrainingConfig& config);

// The shortest decimal that reads back as `value` exactly ("0.01", not
// "0.00999999978"): how the text below writes the optimizer's numbers.
std::string ShortestDecimal(float value);

// The text a checkpoint stores and a rank command carries: protobuf text
// format of replicad.v1.TrainingConfig (every field written, enums by name,
// floats in their shortest exact decimal), so checkpoints written before
// this struct existed, by PrintToString of the message, load unchanged.
std::string FormatTrainingConfig(const TrainingConfig& config);
// Fields left out keep their defaults; unknown fields are skipped.
// InvalidArgument naming the line for text that is not that format, or an
// enum name or number this build does not know.
absl::StatusOr<TrainingConfig> ParseTrainingConfig(absl::string_view text);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_CONFIG_H_
