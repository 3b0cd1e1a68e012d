#ifndef REPLICAD_TESTS_TESTING_HOST_SUM_SLOT_ALL_REDUCE_H_
#define REPLICAD_TESTS_TESTING_HOST_SUM_SLOT_ALL_REDUCE_H_

#include <memory>

#include "core/device/slot_all_reduce.h"

namespace replicad::testing {

// A SlotAllReduce for device-memory stand-ins (device_memory_stand_in.h),
// whose memory the host can read in truth, so that the trainer's paths for
// GPU slots under allreduce run without a GPU: each round sums the
// participants' buffers on the host in participant order, then, with
// `peers`, every rank's sums in rank order through peers->all_gather (one
// gather per AllReduce round, as NCCL makes one collective per bucket),
// scales, and writes the result to every participant. With one slot per
// rank that is the order in which the host sums CPU slots, so such jobs
// train bit for bit like one process of CPU slots. Failures of the gather
// are reported by Join, as the contract says.
std::unique_ptr<SlotAllReduce> MakeHostSumSlotAllReduce(int participants,
                                                        const SlotAllReducePeers* peers);

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_HOST_SUM_SLOT_ALL_REDUCE_H_
