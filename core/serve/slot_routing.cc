#include "core/serve/slot_routing.h"

#include <algorithm>
#include <cstdint>
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

// `rows` over the `chosen` slots in multiples of `granule` rows (the last
// slice takes what is left): each gets the whole granules of its `share`,
// and the granules left over go one by one where they end soonest.
std::vector<BatchSlice> SplitInGranules(int64_t rows, int64_t granule,
                                        const std::vector<int>& chosen,
                                        const std::vector<double>& shares,
                                        const std::vector<SlotLoad>& slots) {
  const int64_t total = (rows + granule - 1) / granule;
  std::vector<int64_t> units(chosen.size());
  int64_t given = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    units[i] =
        std::min<int64_t>(total - given, static_cast<int64_t>(std::max(0.0, shares[i]) / granule));
    given += units[i];
  }
  auto end_with_one_more = [&](size_t i) {
    const SlotLoad& slot = slots[chosen[i]];
    return slot.busy_seconds + slot.speed->Seconds(std::min(rows, (units[i] + 1) * granule));
  };
  for (; given < total; ++given) {
    size_t soonest = 0;
    for (size_t i = 1; i < chosen.size(); ++i) {
      if (end_with_one_more(i) < end_with_one_more(soonest)) soonest = i;
    }
    ++units[soonest];
  }
  std::vector<BatchSlice> slices;
  int64_t begin = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (units[i] == 0) continue;
    const int64_t end = std::min(rows, begin + units[i] * granule);
    slices.push_back(BatchSlice{chosen[i], begin, end});
    begin = end;
  }
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

// `slices` with no slice over its slot's max_rows: the rows over it moved to
// the slices' other slots with room, then to other healthy slots, each slot
// keeping one contiguous slice in the order the slots first appear. False
// (and `slices` unchanged) when the healthy slots cannot hold `rows`.
bool CapToMemory(int64_t rows, const std::vector<SlotLoad>& slots,
                 std::vector<BatchSlice>* slices) {
  std::vector<int> order;
  std::vector<int64_t> taken(slots.size(), 0);
  for (const BatchSlice& slice : *slices) {
    if (taken[slice.slot] == 0) order.push_back(slice.slot);
    taken[slice.slot] += slice.rows();
  }
  int64_t excess = 0;
  for (int s : order) {
    const int64_t kept = std::min(taken[s], slots[s].max_rows);
    excess += taken[s] - kept;
    taken[s] = kept;
  }
  if (excess == 0) return true;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].healthy && taken[s] == 0 &&
        std::find(order.begin(), order.end(), static_cast<int>(s)) == order.end()) {
      order.push_back(static_cast<int>(s));
    }
  }
  for (int s : order) {
    const int64_t room = std::max<int64_t>(0, slots[s].max_rows - taken[s]);
    const int64_t more = std::min(room, excess);
    taken[s] += more;
    excess -= more;
  }
  if (excess > 0) return false;
  std::vector<BatchSlice> capped;
  int64_t begin = 0;
  for (int s : order) {
    if (taken[s] == 0) continue;
    capped.push_back(BatchSlice{s, begin, begin + taken[s]});
    begin += taken[s];
  }
  if (begin != rows) return false;
  *slices = std::move(capped);
  return true;
}

Route ChooseUncapped(int64_t rows, const std::vector<SlotLoad>& slots, bool measured_weights,
                     size_t max_slots, double min_gain) {
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
    if (chosen.size() > std::max<size_t>(max_slots, 1))
      chosen.resize(std::max<size_t>(max_slots, 1));
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
  int64_t granule = 1;
  while (granule * 16 < rows) granule *= 2;
  Route best;
  best.seconds = std::numeric_limits<double>::infinity();
  std::vector<int> chosen;
  for (int next : healthy) {
    if (chosen.size() >= std::max<size_t>(max_slots, 1)) break;
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
    std::vector<BatchSlice> slices = SplitInGranules(rows, granule, chosen, weights, slots);
    const double seconds = Makespan(slices, slots);
    const bool first = best.slices.empty();
    if (first || seconds < best.seconds * (1 - min_gain)) {
      best = Route{std::move(slices), seconds};
    }
  }
  return best;
}

}  // namespace

Route ChooseRoute(int64_t rows, const std::vector<SlotLoad>& slots, bool measured_weights,
                  size_t max_slots, double min_gain) {
  Route route = ChooseUncapped(rows, slots, measured_weights, max_slots, min_gain);
  // The common case, every batch: no slot has a cap the route passes.
  if (std::none_of(route.slices.begin(), route.slices.end(), [&](const BatchSlice& slice) {
        return slice.rows() > slots[slice.slot].max_rows;
      })) {
    return route;
  }
  if (CapToMemory(rows, slots, &route.slices) && route.seconds > 0) {
    // Rows may have moved to slots the estimate did not count.
    const bool measured =
        std::all_of(route.slices.begin(), route.slices.end(), [&](const BatchSlice& slice) {
          return slots[slice.slot].speed != nullptr && slots[slice.slot].speed->measured();
        });
    route.seconds = measured ? Makespan(route.slices, slots) : 0;
  }
  return route;
}

}  // namespace replicad
