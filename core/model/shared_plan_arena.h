#ifndef REPLICAD_CORE_MODEL_SHARED_PLAN_ARENA_H_
#define REPLICAD_CORE_MODEL_SHARED_PLAN_ARENA_H_

#include <cstddef>
#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device.h"

namespace replicad {

// The intermediate-value memory of every execution plan of one host slot.
// A slot caches a plan per slice size (up to 16), and its plans run one at a
// time on the slot's stream thread: one buffer as large as the largest
// plan's arena serves them all, where an arena per plan kept the sum of them
// all resident (resnet18 on one slot after warming sizes 1 to 64: about
// twice the largest).
//
// The buffer follows the largest plan alive: it grows when a larger plan
// runs, and shrinks at the next run once the plans that needed more are gone
// (evicted from the slot's cache and let go), so one batch of 8,000 rows
// does not hold its activations' memory for good.
//
// Host devices only: a larger plan's first run frees the smaller buffer,
// which a device whose kernels run asynchronously could still be reading.
class SharedPlanArena {
 public:
  explicit SharedPlanArena(Device& device) : device_(device) {}

  // A plan of `bytes` exists (from its build to its destruction, on any thread).
  void AddPlan(size_t bytes);
  void RemovePlan(size_t bytes);

  // At least `bytes` of device memory, valid until the next call. Call on
  // the stream thread only, before a plan's first step; allocates only when
  // `bytes` exceeds the buffer, or when the buffer exceeds every plan alive.
  absl::StatusOr<char*> Reserve(size_t bytes);

  // Frees the buffer; the next Reserve allocates again. On the stream
  // thread only, between plans.
  void Release() { buffer_.reset(); }

  size_t capacity() const { return buffer_ == nullptr ? 0 : buffer_->bytes(); }

 private:
  Device& device_;
  std::shared_ptr<Buffer> buffer_;  // Touched on the stream thread only.
  absl::Mutex mu_;
  std::multiset<size_t> plans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_SHARED_PLAN_ARENA_H_
