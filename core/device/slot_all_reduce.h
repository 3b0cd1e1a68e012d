#ifndef REPLICAD_CORE_DEVICE_SLOT_ALL_REDUCE_H_
#define REPLICAD_CORE_DEVICE_SLOT_ALL_REDUCE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace replicad {

// The other processes of a training job (ranks under mpirun or srun,
// core/train/training_ranks.h) whose slots reduce with this process's: what
// a reduction across them needs from the job.
struct SlotAllReducePeers {
  int rank = 0;  // This process's, of `size`.
  int size = 1;
  // Every rank's `mine`, in rank order. Every rank calls it the same number
  // of times, in the same order; it fails (Unavailable, naming the rank)
  // when a rank does not answer in time.
  std::function<absl::StatusOr<std::vector<std::string>>(const std::string& mine)> all_gather;
  // How long a participant waits for the other ranks' part of a reduction.
  absl::Duration timeout = absl::Seconds(60);
  // Ends the job's training for good after a failure the ranks cannot
  // recover from together (the job then exits, for its launcher to restart).
  std::function<void(const absl::Status&)> break_group;
};

// The gradient reduction of data-parallel training on slots whose memory the
// host does not read (GPUs): sums float32 buffers across a fixed group of
// slots, on the devices. Made once per trainer by the backend (NCCL
// communicators are costly to make) and used by every step. Participants are
// the slots in the order given at creation.
//
// In each step every participant makes the same sequence of AllReduce calls
// with the same counts, then Join exactly once, whatever happened in the
// step; all of one participant's calls of a step come from its own stream
// thread (inside Device::Enqueue). Steps do not overlap: no participant
// starts the next step before every participant's Join has returned. A call
// may block that thread until the participants sharing its GPU have made
// theirs, and (NCCL) until the other GPUs' first participants have made
// theirs.
//
// Across ranks (made with SlotAllReducePeers): the participants are every
// rank's slots, rank by rank, and every rank makes the same sequence of
// calls. The peers agree on how to reach each other at the first AllReduce
// of the first step, which every rank's trainer makes in the same step.
//
// Failure: a failed CUDA or NCCL call of any participant ends the step's
// reduction for all of them, and nothing blocks on it: calls waiting for a
// participant that will not come return, reduction work left waiting on the
// devices is aborted, and the step's later AllReduce calls issue nothing. Across ranks, a rank's
// participant that waits longer than the peers' timeout for the others'
// part fails the step with Unavailable.
// Every Join that returns after the failure returns the step's first error,
// which names the device and the call; a Join that returned before it
// returned OK, but the sums of that step are unspecified on every slot, so
// the caller fails the step if any participant's Join failed. The next step
// starts afresh, unless a slot's device is gone for good (health() not OK):
// then every later Join returns that error. Across ranks every failure is
// such a one: the ranks cannot agree afresh in the middle of a job, so the
// reduction calls the peers' break_group and every later Join fails.
class SlotAllReduce {
 public:
  virtual ~SlotAllReduce() = default;

  // Issues, after the work issued so far on the participant's stream, the
  // replacement of data[0..count) (float32s in that slot's memory) by
  // `scale` times its sum over all participants. With `contributes` false
  // the participant adds zeros (a slot without rows this step, or one whose
  // backward pass failed: it still takes part, or the others would wait for
  // it forever); `data` is then overwritten with the result too. Returns once
  // issued: the reduction may overlap later work on the stream until Join.
  // Failures, this participant's or another's, are reported by Join, not
  // here, so that every participant goes on to its Join: this returns OK.
  virtual absl::Status AllReduce(int participant, float* data, size_t count, float scale,
                                 bool contributes) = 0;

  // Makes the participant's stream wait for everything its AllReduce calls
  // issued, so work issued after Join reads the sums. Ends the
  // participant's step; the step's first failure, if any.
  virtual absl::Status Join(int participant) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_SLOT_ALL_REDUCE_H_
