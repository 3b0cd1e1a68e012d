#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "core/backends/cuda/kernels/launch_config.cuh"
#include "core/backends/cuda/kernels/topk_launch.h"

namespace replicad {
namespace {

// Keys whose unsigned ascending order is the CPU's TopK order of the values
// (axis_kernels.cc): the smallest first, or with `largest` the largest first.
// Equal keys are exactly the values the CPU's comparator calls equal, which
// the stable sort then leaves in index order.
//
// float32: every NaN becomes one positive NaN, whose key lies above +inf's
// (NaN is greater than every number, whichever way TopK sorts), and -0
// becomes +0 (the CPU compares them equal). Then the usual bijection: a
// sign bit flipped for positives, every bit for negatives.
__device__ uint32_t TopKSortKey(float x, bool largest) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) bits = 0x7FC00000u;
  if (bits == 0x80000000u) bits = 0;
  const uint32_t key = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return largest ? ~key : key;
}

// int64: two's complement with the sign bit flipped.
__device__ uint64_t TopKSortKey(int64_t x, bool largest) {
  const uint64_t key = static_cast<uint64_t>(x) ^ (uint64_t{1} << 63);
  return largest ? ~key : key;
}

template <typename T>
struct TopKKeyOf;
template <>
struct TopKKeyOf<float> {
  using Type = uint32_t;
};
template <>
struct TopKKeyOf<int64_t> {
  using Type = uint64_t;
};

// Element e of the input ([outer, n, inner] row-major) goes to position i
// of line (o, j), which is contiguous: line l = o * inner + j at l * n.
template <typename T, typename Key>
__global__ void TopKKeysKernel(const T* in, Key* keys, int* positions, int64_t total, int64_t n,
                               int64_t inner, bool largest) {
  REPLICAD_GRID_STRIDE_LOOP(e, total) {
    const int64_t j = e % inner;
    const int64_t rest = e / inner;
    const int64_t i = rest % n;
    const int64_t o = rest / n;
    const int64_t at = (o * inner + j) * n + i;
    keys[at] = TopKSortKey(in[e], largest);
    positions[at] = static_cast<int>(i);
  }
}

// Output element e ([outer, k, inner]) is rank r of line (o, j).
template <typename T>
__global__ void TopKGatherKernel(const T* in, const int* sorted_positions, T* values,
                                 int64_t* indices, int64_t count, int64_t n, int64_t k,
                                 int64_t inner) {
  REPLICAD_GRID_STRIDE_LOOP(e, count) {
    const int64_t j = e % inner;
    const int64_t rest = e / inner;
    const int64_t r = rest % k;
    const int64_t o = rest / k;
    const int64_t i = sorted_positions[(o * inner + j) * n + r];
    values[e] = in[(o * n + i) * inner + j];
    indices[e] = i;
  }
}

// The workspace: keys twice (the sort's double buffer), positions twice,
// then CUB's temporary storage, each part starting 256 bytes on from the
// last (CUB aligns its own storage within its part).
constexpr size_t kTopKAlign = 256;

size_t TopKAligned(size_t bytes) { return (bytes + kTopKAlign - 1) / kTopKAlign * kTopKAlign; }

template <typename Key>
size_t TopKArraysBytes(int64_t total) {
  return 2 * TopKAligned(total * sizeof(Key)) + 2 * TopKAligned(total * sizeof(int));
}

// Sorts each line's (key, position) pairs by key, stably; one line sorts
// over the whole GPU, several one CUB block each. `temp` null: sets
// temp_bytes to what the sort needs.
template <typename Key>
cudaError_t SortTopKLines(void* temp, size_t& temp_bytes, cub::DoubleBuffer<Key>& keys,
                          cub::DoubleBuffer<int>& positions, const TopKShape& shape,
                          const int* segment_offsets, cudaStream_t stream) {
  const int total = static_cast<int>(shape.outer * shape.axis_dim * shape.inner);
  const int lines = static_cast<int>(shape.outer * shape.inner);
  constexpr int kBits = static_cast<int>(sizeof(Key) * 8);
  if (lines == 1) {
    return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, positions, total, 0, kBits,
                                           stream);
  }
  return cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, keys, positions, total, lines,
                                                  segment_offsets, segment_offsets + 1, 0, kBits,
                                                  stream);
}

template <typename Key>
cudaError_t TopKBytesOf(const TopKShape& shape, size_t* bytes) {
  cub::DoubleBuffer<Key> keys;
  cub::DoubleBuffer<int> positions;
  size_t temp_bytes = 0;
  const cudaError_t error =
      SortTopKLines<Key>(nullptr, temp_bytes, keys, positions, shape, nullptr, nullptr);
  if (error != cudaSuccess) return error;
  *bytes = TopKArraysBytes<Key>(shape.outer * shape.axis_dim * shape.inner) + temp_bytes;
  return cudaSuccess;
}

template <typename T>
cudaError_t TopKOn(const T* in, T* values, int64_t* indices, const TopKShape& shape,
                   const int* segment_offsets, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) {
  using Key = typename TopKKeyOf<T>::Type;
  const int64_t n = shape.axis_dim;
  const int64_t total = shape.outer * n * shape.inner;
  char* at = static_cast<char*>(workspace);
  Key* keys[2];
  int* positions[2];
  for (Key*& part : keys) {
    part = reinterpret_cast<Key*>(at);
    at += TopKAligned(total * sizeof(Key));
  }
  for (int*& part : positions) {
    part = reinterpret_cast<int*>(at);
    at += TopKAligned(total * sizeof(int));
  }
  size_t temp_bytes = workspace_bytes - TopKArraysBytes<Key>(total);

  TopKKeysKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(
      in, keys[0], positions[0], total, n, shape.inner, shape.largest);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  cub::DoubleBuffer<Key> key_buffer(keys[0], keys[1]);
  cub::DoubleBuffer<int> position_buffer(positions[0], positions[1]);
  // The sort flips the buffers' selectors on the host as it enqueues its
  // passes, so Current() names the sorted positions once it returns.
  error = SortTopKLines<Key>(at, temp_bytes, key_buffer, position_buffer, shape, segment_offsets,
                             stream);
  if (error != cudaSuccess) return error;
  const int64_t count = shape.outer * shape.k * shape.inner;
  TopKGatherKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(
      in, position_buffer.Current(), values, indices, count, n, shape.k, shape.inner);
  return cudaGetLastError();
}

}  // namespace

cudaError_t TopKWorkspaceBytes(const TopKShape& shape, size_t* bytes) {
  return shape.int64_data ? TopKBytesOf<uint64_t>(shape, bytes)
                          : TopKBytesOf<uint32_t>(shape, bytes);
}

cudaError_t LaunchTopK(const float* in, float* values, int64_t* indices, const TopKShape& shape,
                       const int* segment_offsets, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  return TopKOn(in, values, indices, shape, segment_offsets, workspace, workspace_bytes, stream);
}

cudaError_t LaunchTopK(const int64_t* in, int64_t* values, int64_t* indices, const TopKShape& shape,
                       const int* segment_offsets, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  return TopKOn(in, values, indices, shape, segment_offsets, workspace, workspace_bytes, stream);
}

}  // namespace replicad
