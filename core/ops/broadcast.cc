#include "core/ops/broadcast.h"

#include <algorithm>

namespace replicad {

Shape PadToRank(const Shape& shape, size_t rank) {
  Shape padded(rank - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  return padded;
}

std::optional<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  const Shape pa = PadToRank(a, rank);
  const Shape pb = PadToRank(b, rank);
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (pa[i] == pb[i] || pb[i] == 1) {
      out[i] = pa[i];
    } else if (pa[i] == 1) {
      out[i] = pb[i];
    } else {
      return std::nullopt;
    }
  }
  return out;
}

bool BroadcastsTo(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const Shape padded = PadToRank(from, to.size());
  for (size_t i = 0; i < to.size(); ++i) {
    if (padded[i] != to[i] && padded[i] != 1) return false;
  }
  return true;
}

}  // namespace replicad
