#ifndef REPLICAD_CORE_MODEL_ARENA_PLANNER_H_
#define REPLICAD_CORE_MODEL_ARENA_PLANNER_H_

#include <cstddef>
#include <vector>

namespace replicad {

// A block that must stay valid from the start of step `first_step` to the
// end of step `last_step` (inclusive).
struct ArenaRequest {
  size_t bytes = 0;
  int first_step = 0;
  int last_step = 0;
};

struct ArenaLayout {
  std::vector<size_t> offsets;  // One per request, `alignment`-aligned.
  size_t total_bytes = 0;
};

// Places the requests in one arena so that blocks whose lifetimes overlap
// never overlap in memory, reusing freed ranges best-fit. Blocks born in a
// step never share bytes with blocks that die in that step, so a kernel's
// outputs never alias its inputs.
ArenaLayout PlanArena(const std::vector<ArenaRequest>& requests, size_t alignment = 64);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ARENA_PLANNER_H_
