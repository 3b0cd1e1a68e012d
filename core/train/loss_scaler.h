#ifndef REPLICAD_CORE_TRAIN_LOSS_SCALER_H_
#define REPLICAD_CORE_TRAIN_LOSS_SCALER_H_

#include <cstdint>

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

 private:
  float scale_;
  int64_t growth_interval_;
  int64_t finite_in_a_row_ = 0;
  int64_t overflowed_steps_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_LOSS_SCALER_H_
