#ifndef REPLICAD_CORE_BASE_NARROW_FLOAT_H_
#define REPLICAD_CORE_BASE_NARROW_FLOAT_H_

#include <cmath>
#include <limits>

namespace replicad {

// `value` as a float, rounded; past float's range an infinity of its sign
// (a client's 1e300 then fails validation by name) rather than the undefined
// conversion. NaN stays NaN.
inline float NarrowToFloat(double value) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::isnan(value) || std::fabs(value) <= kMax) return static_cast<float>(value);
  return value > 0 ? std::numeric_limits<float>::infinity()
                   : -std::numeric_limits<float>::infinity();
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BASE_NARROW_FLOAT_H_
