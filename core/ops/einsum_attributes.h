#ifndef REPLICAD_CORE_OPS_EINSUM_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_EINSUM_ATTRIBUTES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"

namespace replicad {

// Einsum's equation, parsed against its inputs' shapes, for the shape rule
// and the kernels. Each label of the equation is one dim; "..." stands for
// the dims an input has beyond its letters, right-aligned and broadcast as
// numpy does (they become labels '0' to '9'). Without "->" the output is the
// ellipsis dims, then the letters seen once, in alphabetical order.
// InvalidArgument naming the node and the equation for a malformed equation,
// an input whose rank disagrees with its term, or one label with sizes that
// differ (other than 1 within the ellipsis). Pure function; thread-safe.
struct EinsumLayout {
  std::vector<std::string> terms;  // Each input's labels, one per dim.
  std::string output;              // The output's labels, one per dim.
  std::string labels;              // Every label, output's first.
  std::vector<int64_t> sizes;      // Of each of `labels`.
};
absl::StatusOr<EinsumLayout> ParseEinsum(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_EINSUM_ATTRIBUTES_H_
