#include "client/epoch_order.h"

#include <random>
#include <utility>

namespace replicad::client {

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  if (n <= 0) return {};
  // Unsigned arithmetic so that the wrap-around the header promises is defined.
  std::mt19937_64 generator(seed + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i >= 1; --i) {
    const uint64_t j = generator() % static_cast<uint64_t>(i + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace replicad::client
