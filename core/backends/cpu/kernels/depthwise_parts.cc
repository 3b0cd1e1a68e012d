#include "core/backends/cpu/kernels/depthwise_parts.h"

#include <algorithm>

namespace replicad {
namespace {

constexpr int64_t kBlock = 16;          // Channels per block (AVX-512 floats).
constexpr int64_t kBlocksPerChunk = 4;  // jit_dw's nb_ch_blocking on AVX-512.
// Below this many multiply-adds saved on the busiest thread (about 2 us at
// jit_dw's 25 per ns on one core of the 2-core EPYC) a second primitive's
// call and barrier cost as much.
constexpr int64_t kMinSavedMacs = 50'000;

// The busiest thread's share, in (block, output row) pairs, of oneDNN's
// split of `blocks` channel blocks by `rows` output rows: balance211 over
// the (chunk, row) items in chunk-major order.
int64_t BusiestShare(int64_t blocks, int64_t rows, int threads) {
  const int64_t chunks = (blocks + kBlocksPerChunk - 1) / kBlocksPerChunk;
  const int64_t items = chunks * rows;
  const int64_t team = std::min<int64_t>(threads, items);
  if (team <= 1) return blocks * rows;
  const int64_t larger = (items + team - 1) / team;  // balance211's n1; later threads get n1 - 1.
  const int64_t with_larger = items - (larger - 1) * team;
  int64_t busiest = 0;
  int64_t item = 0;
  for (int64_t t = 0; t < team; ++t) {
    const int64_t end = item + (t < with_larger ? larger : larger - 1);
    int64_t share = 0;
    for (; item < end; ++item) {
      const int64_t chunk = item / rows;
      share += std::min(kBlocksPerChunk, blocks - chunk * kBlocksPerChunk);
    }
    busiest = std::max(busiest, share);
  }
  return busiest;
}

}  // namespace

std::vector<ChannelRange> DepthwiseChannelParts(int64_t channels, int64_t out_rows,
                                                int64_t out_cols, int64_t kernel_area,
                                                int threads) {
  const std::vector<ChannelRange> whole{{0, channels}};
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  const int64_t short_blocks = blocks % kBlocksPerChunk;
  if (threads <= 1 || blocks <= kBlocksPerChunk || short_blocks == 0) return whole;
  const int64_t full_blocks = blocks - short_blocks;
  const int64_t as_one = BusiestShare(blocks, out_rows, threads);
  const int64_t as_two =
      BusiestShare(full_blocks, out_rows, threads) + BusiestShare(short_blocks, out_rows, threads);
  const int64_t saved_macs = (as_one - as_two) * kBlock * out_cols * kernel_area;
  if ((as_one - as_two) * 10 < as_one || saved_macs < kMinSavedMacs) return whole;
  const int64_t split = full_blocks * kBlock;
  return {{0, split}, {split, channels - split}};
}

}  // namespace replicad
