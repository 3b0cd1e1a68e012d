#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_DEPTHWISE_PARTS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_DEPTHWISE_PARTS_H_

#include <cstdint>
#include <vector>

namespace replicad {

// Internal to the CPU kernels: how a batch-1 depthwise convolution in
// 16-channel blocks is cut into channel ranges so that the slot's threads
// share its work evenly.
//
// oneDNN 2.6's AVX-512 depthwise kernel (jit_dw) hands each thread an equal
// count of (chunk, output row) items, a chunk being 4 channel blocks with the
// last one shorter. Where the blocks do not come in fours, one thread gets
// the full chunks and another the short one: 72 channels (5 blocks) at
// 56 x 56 on 2 threads put 4 blocks on one thread, 0.055 ms against 0.037 ms
// as two primitives, the blocks in fours and the rest (a standalone program
// on a 2-core AVX-512 EPYC). At batch 2 and more the threads take whole
// images, so only batch 1 is cut.

struct ChannelRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// The ranges to run a batch-1 depthwise convolution of `channels` channels,
// `out_rows` x `out_cols` outputs and a `kernel_area`-tap window as, on
// `threads` threads: one range (the whole) unless the cut saves at least a
// tenth of the busiest thread's work and about as much as a second
// primitive's call costs.
std::vector<ChannelRange> DepthwiseChannelParts(int64_t channels, int64_t out_rows,
                                                int64_t out_cols, int64_t kernel_area, int threads);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_DEPTHWISE_PARTS_H_
