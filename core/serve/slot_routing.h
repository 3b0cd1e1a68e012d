#ifndef REPLICAD_CORE_SERVE_SLOT_ROUTING_H_
#define REPLICAD_CORE_SERVE_SLOT_ROUTING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device/batch_split.h"
#include "core/serve/slot_speed.h"

namespace replicad {

// What routing knows of one slot when a batch is about to run.
struct SlotLoad {
  bool healthy = true;
  double weight = 1.0;               // Configured (--slot-weights 3,1).
  double busy_seconds = 0;           // Estimated time until the work it already has is done.
  const SlotSpeed* speed = nullptr;  // Null or unmeasured: its speed is unknown.
  // The largest slice known to fit its memory (a larger one's plans did not).
  int64_t max_rows = INT64_MAX;
};

struct Route {
  std::vector<BatchSlice> slices;  // Empty when no slot is healthy.
  double seconds = 0;              // Estimated time until the batch is done; 0: unknown.
};

// Where a batch of `rows` runs: whole on one slot, or split over several,
// whichever is estimated to finish it soonest. Slots are tried in the order
// they become free (then fastest first); one more slot is taken only when it
// shortens the estimate by more than `min_gain` (a fraction), because every
// slice pays the slot's fixed cost and holds a slot other batches could use.
// Shares make the chosen slots finish together (each slot's speed line and
// its busy time). Without `measured_weights` (weights the operator fixed),
// or while some healthy slot's speed is unknown, the batch is split over the
// free healthy slots (all healthy ones if none is free) by their configured
// weights instead.
//
// Measured shares are rounded to multiples of a power of two near rows/16,
// so that noise in the measurements does not make every batch a slice size
// of its own (each new size builds its plans first). At most `max_slots`
// slots are used: the scheduler keeps one free for the queue's next batch
// when requests are waiting, so one large batch cannot hold up small ones.
//
// No slice exceeds its slot's max_rows: the rows over it go to the route's
// other slots with room, then to other healthy slots, in slot order (the
// route is left as chosen when the healthy slots cannot hold them together;
// it will then fail as the device says).
Route ChooseRoute(int64_t rows, const std::vector<SlotLoad>& slots, bool measured_weights,
                  size_t max_slots = SIZE_MAX, double min_gain = 0.1);

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SLOT_ROUTING_H_
