#ifndef REPLICAD_CORE_TRAIN_LOSS_SCALER_H_
#define REPLICAD_CORE_TRAIN_LOSS_SCALER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor/tensor.h"

namespace replicad {

// Dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler does
// it (and with its defaults): the loss's gradient is multiplied by the scale
// before the backward pass, so that small gradients survive float16, and the
// summed gradients are divided by it before the optimizer. A step whose loss
// or gradients are not finite (float16 overflowed) is skipped and halves the
// scale; `growth_interval` finite steps in a row double it.
struct LossScaling {
  float initial_scale = 65536.0f;  // 2^16, GradScaler's init_scale.
  int64_t growth_interval = 2000;
};

// The scale between steps. Thread-compatible.
class LossScaler {
 public:
  explicit LossScaler(const LossScaling& config)
      : scale_(config.initial_scale), growth_interval_(config.growth_interval) {}

  // What the next step's loss gradient is multiplied by.
  float scale() const { return scale_; }

  // After a step computed with scale(): `finite` is whether its loss and
  // gradients all were. The scale halves after a step that was not (never
  // below the smallest normal float) and doubles after growth_interval
  // finite steps in a row (never to infinity).
  void Update(bool finite);

  // Steps skipped for overflow so far.
  int64_t overflowed_steps() const { return overflowed_steps_; }

  // What a checkpoint keeps, as GradScaler's state_dict keeps its scale and
  // growth tracker: two entries for the trainer's optimizer state,
  // kScaleState (float32 [1]) and kFiniteStepsState (int64 [1], the finite
  // steps in a row since the scale last changed).
  static constexpr char kScaleState[] = "replicad.loss_scale";
  static constexpr char kFiniteStepsState[] = "replicad.loss_scale_finite_steps";
  std::vector<std::pair<std::string, Tensor>> State() const;
  void AppendState(std::vector<std::pair<std::string, Tensor>>* state) const;

  // Takes `state`'s two entries (where both are there; others are left) as
  // the scale and the finite steps in a row. InvalidArgument, naming the
  // entry, the expected and the received value, for a wrong type or shape,
  // a scale that is not a finite number > 0 or a negative count; nothing
  // changes then. Where `state` has neither, nothing changes (a checkpoint
  // written without fp16).
  absl::Status Restore(const std::vector<std::pair<std::string, Tensor>>& state);

 private:
  float scale_;
  int64_t growth_interval_;
  int64_t finite_in_a_row_ = 0;
  int64_t overflowed_steps_ = 0;
};

// `state` less LossScaler::State's entries (for the optimizer's Restore; a
// run without fp16 drops them).
std::vector<std::pair<std::string, Tensor>> WithoutLossScale(
    const std::vector<std::pair<std::string, Tensor>>& state);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_LOSS_SCALER_H_
