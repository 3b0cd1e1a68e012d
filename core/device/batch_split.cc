#include "core/device/batch_split.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace replicad {

std::vector<BatchSlice> SplitBatch(int64_t batch, const std::vector<double>& weights) {
  std::vector<BatchSlice> slices;
  if (batch <= 0 || weights.empty()) return slices;
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> rows(weights.size());
  std::vector<double> remainder(weights.size());
  int64_t assigned = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const double exact = static_cast<double>(batch) * weights[s] / total;
    rows[s] = static_cast<int64_t>(std::floor(exact));
    remainder[s] = exact - static_cast<double>(rows[s]);
    assigned += rows[s];
  }
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  // Floating-point error can leave the floors one row off either way; the
  // loop below hands out exactly what is missing.
  for (size_t i = 0; assigned < batch; i = (i + 1) % order.size()) {
    ++rows[order[i]];
    ++assigned;
  }
  for (size_t i = order.size(); assigned > batch && i-- > 0;) {
    if (rows[order[i]] > 0) {
      --rows[order[i]];
      --assigned;
    }
  }
  int64_t begin = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    if (rows[s] == 0) continue;
    slices.push_back({static_cast<int>(s), begin, begin + rows[s]});
    begin += rows[s];
  }
  return slices;
}

}  // namespace replicad
