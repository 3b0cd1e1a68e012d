#include "core/serve/slot_speed.h"

#include <algorithm>

namespace replicad {

void SlotSpeed::Record(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds >= 0)) return;  // Also drops NaN.
  int k = 0;
  for (uint64_t r = static_cast<uint64_t>(rows); r > 1; r >>= 1) ++k;
  k = std::min<int>(static_cast<int>(classes_.size()) - 1, k);
  SizeClass& c = classes_[k];
  if (!c.used) {
    c = SizeClass{static_cast<double>(rows), seconds, true};
    ++classes_used_;
  } else {
    c.rows += kNewWeight * (static_cast<double>(rows) - c.rows);
    c.seconds += kNewWeight * (seconds - c.seconds);
  }
  Refit();
}

void SlotSpeed::Refit() {
  // Least squares through the classes' means, each class weighing the same,
  // so a flood of one size cannot erase what is known of the others.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const SizeClass& c : classes_) {
    if (!c.used) continue;
    n += 1;
    sx += c.rows;
    sy += c.seconds;
    sxx += c.rows * c.rows;
    sxy += c.rows * c.seconds;
  }
  const double det = n * sxx - sx * sx;
  if (n >= 2 && det > 0) {
    per_row_ = (n * sxy - sx * sy) / det;
    fixed_ = (sy - per_row_ * sx) / n;
  } else {
    per_row_ = -1;  // One class: proportional, below.
  }
  // Noise can tilt the line below zero at either end; a slot never runs in
  // negative time, so fall back to the line through the origin.
  if (per_row_ < 0 || fixed_ < 0) {
    fixed_ = 0;
    per_row_ = sx > 0 ? sy / sx : 0;
  }
}

double SlotSpeed::Seconds(int64_t rows) const {
  if (!measured() || rows <= 0) return 0;
  return fixed_ + per_row_ * static_cast<double>(rows);
}

double SlotSpeed::fixed_seconds() const { return fixed_; }
double SlotSpeed::seconds_per_row() const { return per_row_; }

double SlotSpeed::RowsPerSecond(int64_t rows) const {
  const double seconds = Seconds(rows);
  return seconds > 0 ? static_cast<double>(rows) / seconds : 0;
}

}  // namespace replicad
