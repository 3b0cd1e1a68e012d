#include "core/serve/slot_routing.h"

#include <algorithm>
#include <limits>

namespace replicad {
namespace {

// `SplitBatch` over the slots `chosen` (indices into `slots`) by `weights`,
// with the slices' slots made indices into `slots`.
std::vector<BatchSlice> SplitOver(int64_t rows, const std::vector<int>& chosen,
                                  const std::vector<double>& weights) {
  std::vector<BatchSlice> slices = SplitBatch(rows, weights);
  for (BatchSlice& slice : slices) slice.slot = chosen[slice.slot];
  return slices;
}

double Makespan(const std::vector<BatchSlice>& slices, const std::vector<SlotLoad>& slots) {
  double end = 0;
  for (const BatchSlice& slice : slices) {
    const SlotLoad& slot = slots[slice.slot];
    end = std::max(end, slot.busy_seconds + slot.speed->Seconds(slice.rows()));
  }
  return end;
}

}  // namespace

Route ChooseRoute(int64_t rows, const std::vector<SlotLoad>& slots, bool measured_weights,
                  double min_gain) {
  std::vector<int> healthy;
  bool all_measured = true;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (!slots[s].healthy) continue;
    healthy.push_back(static_cast<int>(s));
    all_measured = all_measured && slots[s].speed != nullptr && slots[s].speed->measured();
  }
  if (healthy.empty() || rows <= 0) return Route{};

  if (!measured_weights || !all_measured) {
    std::vector<int> chosen;
    for (int s : healthy) {
      if (slots[s].busy_seconds <= 0) chosen.push_back(s);
    }
    if (chosen.empty()) chosen = healthy;
    std::vector<double> weights;
    for (int s : chosen) weights.push_back(slots[s].weight);
    return Route{SplitOver(rows, chosen, weights), 0};
  }

  // Free first, then fastest at this batch size.
  std::stable_sort(healthy.begin(), healthy.end(), [&](int a, int b) {
    if (slots[a].busy_seconds != slots[b].busy_seconds) {
      return slots[a].busy_seconds < slots[b].busy_seconds;
    }
    return slots[a].speed->Seconds(rows) < slots[b].speed->Seconds(rows);
  });
  Route best;
  best.seconds = std::numeric_limits<double>::infinity();
  std::vector<int> chosen;
  for (int next : healthy) {
    chosen.push_back(next);
    // Shares x_s with busy_s + fixed_s + per_row_s * x_s equal for every
    // chosen slot and summing to `rows`.
    std::vector<double> weights;
    double inverse_sum = 0, offset_sum = 0;
    for (int s : chosen) {
      const double per_row = std::max(slots[s].speed->seconds_per_row(), 1e-12);
      inverse_sum += 1 / per_row;
      offset_sum += (slots[s].busy_seconds + slots[s].speed->fixed_seconds()) / per_row;
    }
    const double finish = (static_cast<double>(rows) + offset_sum) / inverse_sum;
    bool viable = true;
    for (int s : chosen) {
      const double per_row = std::max(slots[s].speed->seconds_per_row(), 1e-12);
      const double share =
          (finish - slots[s].busy_seconds - slots[s].speed->fixed_seconds()) / per_row;
      // (A slot alone gets all rows; rounding must not call that too few.)
      viable = viable && (chosen.size() == 1 || share >= 1);
      weights.push_back(share);
    }
    // This slot cannot take a row before the others finish without it; the
    // later ones (busier or slower) cannot either.
    if (!viable) break;
    std::vector<BatchSlice> slices = SplitOver(rows, chosen, weights);
    const double seconds = Makespan(slices, slots);
    const bool first = best.slices.empty();
    if (first || seconds < best.seconds * (1 - min_gain)) {
      best = Route{std::move(slices), seconds};
    }
  }
  return best;
}

}  // namespace replicad
