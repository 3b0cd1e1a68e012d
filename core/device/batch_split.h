#ifndef REPLICAD_CORE_DEVICE_BATCH_SPLIT_H_
#define REPLICAD_CORE_DEVICE_BATCH_SPLIT_H_

#include <cstdint>
#include <vector>

namespace replicad {

// Rows [begin, end) of a batch, run by slot `slot`.
struct BatchSlice {
  int slot = 0;
  int64_t begin = 0;
  int64_t end = 0;
  // Once run: how long the slot took for it (copies included), in seconds.
  double seconds = 0;
  // Its plans did not fit the slot's memory (the Run failed ResourceExhausted
  // before any slice started and before any output was allocated).
  bool out_of_memory = false;
  // It ran on the set's wide replica, the other slots being idle, with their
  // cores lent to it (ReplicaSet): its seconds say nothing of the slot's own
  // speed.
  bool widened = false;

  int64_t rows() const { return end - begin; }
  bool operator==(const BatchSlice& o) const {
    return slot == o.slot && begin == o.begin && end == o.end;
  }
};

// Cuts `batch` rows into contiguous slices, in slot order, with sizes
// proportional to `weights` (all > 0). Each slot gets the floor of its exact
// share and the leftover rows go one each to the largest remainders (ties to
// the lower slot), so sizes differ from the exact shares by less than one row.
// Slots whose share rounds to zero rows are left out: a batch smaller than
// the slot count uses fewer slots. batch == 0 gives no slices.
std::vector<BatchSlice> SplitBatch(int64_t batch, const std::vector<double>& weights);

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_BATCH_SPLIT_H_
