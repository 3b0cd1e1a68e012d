#ifndef REPLICAD_CORE_DEVICE_SLOT_ALL_REDUCE_H_
#define REPLICAD_CORE_DEVICE_SLOT_ALL_REDUCE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace replicad {

// The gradient reduction of data-parallel training on slots whose memory the
// host does not read (GPUs): sums float32 buffers across a fixed group of
// slots, on the devices. Made once per trainer by the backend (NCCL
// communicators are costly to make) and used by every step. Participants are
// the slots in the order given at creation.
//
// Every participant makes the same sequence of calls with the same counts,
// each from its own stream thread (inside Device::Enqueue). A call may block
// that thread until the participants sharing its GPU have made theirs, and
// (NCCL) until the other GPUs' first participants have made theirs.
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
  virtual absl::Status AllReduce(int participant, float* data, size_t count, float scale,
                                 bool contributes) = 0;

  // Makes the participant's stream wait for every AllReduce it issued, so
  // work issued after Join reads the sums.
  virtual absl::Status Join(int participant) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_SLOT_ALL_REDUCE_H_
