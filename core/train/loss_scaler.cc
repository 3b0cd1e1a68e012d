#include "core/train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace replicad {

void LossScaler::Update(bool finite) {
  if (!finite) {
    ++overflowed_steps_;
    finite_in_a_row_ = 0;
    scale_ = std::max(scale_ * 0.5f, std::numeric_limits<float>::min());
    return;
  }
  if (++finite_in_a_row_ < growth_interval_) return;
  finite_in_a_row_ = 0;
  // GradScaler keeps the scale it has where doubling would overflow.
  if (std::isfinite(scale_ * 2.0f)) scale_ *= 2.0f;
}

}  // namespace replicad
