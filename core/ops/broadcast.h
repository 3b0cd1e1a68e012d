#ifndef REPLICAD_CORE_OPS_BROADCAST_H_
#define REPLICAD_CORE_OPS_BROADCAST_H_

#include <optional>

#include "core/tensor/shape.h"

namespace replicad {

// ONNX (numpy) broadcasting of concrete shapes. Pure functions; thread-safe.

// Multidirectional: shapes are right-aligned and each pair of dims must be
// equal or contain a 1 (a 0 pairs with 0 or 1). nullopt when they do not.
std::optional<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// Unidirectional: true when `from` broadcasts to exactly `to` (Gemm's C).
bool BroadcastsTo(const Shape& from, const Shape& to);

// `shape` with leading 1s up to `rank` (which must be >= shape.size()).
Shape PadToRank(const Shape& shape, size_t rank);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_BROADCAST_H_
