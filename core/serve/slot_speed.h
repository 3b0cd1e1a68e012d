#ifndef REPLICAD_CORE_SERVE_SLOT_SPEED_H_
#define REPLICAD_CORE_SERVE_SLOT_SPEED_H_

#include <array>
#include <cstdint>

namespace replicad {

// How long one slot takes to run a slice of a model, learnt from the slices
// it ran: seconds(rows) = fixed + per_row * rows, a line fitted through the
// running means of size classes (rows in [2^k, 2^(k+1))). Each class keeps an
// exponentially weighted mean, so the estimate follows a slot that slows
// down (another tenant, thermal limits) while classes that stopped being
// used keep what they last saw. Not thread-safe (its scheduler locks it).
class SlotSpeed {
 public:
  // A new observation's weight in its class's mean.
  static constexpr double kNewWeight = 0.2;

  void Record(int64_t rows, double seconds);
  bool measured() const { return classes_used_ > 0; }
  // Estimated seconds for a slice of `rows` (> 0); 0 while unmeasured. With
  // one size class measured, time is taken as proportional to rows.
  double Seconds(int64_t rows) const;
  // The fit's parts, >= 0: seconds per slice and seconds per row.
  double fixed_seconds() const;
  double seconds_per_row() const;
  // rows / Seconds(rows); 0 while unmeasured.
  double RowsPerSecond(int64_t rows) const;

 private:
  struct SizeClass {
    double rows = 0;     // Weighted mean of the slices' rows.
    double seconds = 0;  // Weighted mean of their times.
    bool used = false;
  };
  void Refit();

  std::array<SizeClass, 40> classes_{};
  int classes_used_ = 0;
  double fixed_ = 0, per_row_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SLOT_SPEED_H_
