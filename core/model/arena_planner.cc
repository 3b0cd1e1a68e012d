#include "core/model/arena_planner.h"

#include <algorithm>
#include <iterator>
#include <map>

namespace replicad {
namespace {

// Free ranges of the arena by offset, merged with their neighbours on release.
class FreeList {
 public:
  size_t Take(size_t bytes, size_t* end) {
    auto best = ranges_.end();
    for (auto it = ranges_.begin(); it != ranges_.end(); ++it) {
      if (it->second >= bytes && (best == ranges_.end() || it->second < best->second)) best = it;
    }
    if (best != ranges_.end()) {
      const size_t offset = best->first;
      const size_t left = best->second - bytes;
      ranges_.erase(best);
      if (left > 0) ranges_[offset + bytes] = left;
      return offset;
    }
    // Grow the arena, starting inside a free range that touches its end.
    size_t offset = *end;
    if (!ranges_.empty()) {
      auto last = std::prev(ranges_.end());
      if (last->first + last->second == *end) {
        offset = last->first;
        ranges_.erase(last);
      }
    }
    *end = offset + bytes;
    return offset;
  }

  void Give(size_t offset, size_t bytes) {
    auto next = ranges_.lower_bound(offset);
    if (next != ranges_.end() && offset + bytes == next->first) {
      bytes += next->second;
      next = ranges_.erase(next);
    }
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += bytes;
        return;
      }
    }
    ranges_[offset] = bytes;
  }

 private:
  std::map<size_t, size_t> ranges_;
};

}  // namespace

ArenaLayout PlanArena(const std::vector<ArenaRequest>& requests, size_t alignment) {
  ArenaLayout layout;
  layout.offsets.assign(requests.size(), 0);
  int last_step = -1;
  for (const ArenaRequest& r : requests) last_step = std::max(last_step, r.last_step);

  std::vector<std::vector<size_t>> born(last_step + 1), dying(last_step + 1);
  for (size_t i = 0; i < requests.size(); ++i) {
    born[requests[i].first_step].push_back(i);
    dying[requests[i].last_step].push_back(i);
  }
  auto aligned = [alignment](size_t bytes) {
    return std::max<size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
  };
  FreeList free_list;
  for (int step = 0; step <= last_step; ++step) {
    for (size_t i : born[step]) {
      layout.offsets[i] = free_list.Take(aligned(requests[i].bytes), &layout.total_bytes);
    }
    for (size_t i : dying[step]) free_list.Give(layout.offsets[i], aligned(requests[i].bytes));
  }
  return layout;
}

}  // namespace replicad
