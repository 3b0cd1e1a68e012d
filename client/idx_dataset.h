#ifndef REPLICAD_CLIENT_IDX_DATASET_H_
#define REPLICAD_CLIENT_IDX_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace replicad::client {

// One split of an MNIST-style image classification set (MNIST, Fashion-MNIST),
// held in memory as the float batch a model takes.
struct ImageDataset {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  // [count, 1, rows, cols], row-major; each unsigned byte pixel divided by 255,
  // so every value is in [0, 1].
  std::vector<float> images;
  // [count]; the label bytes as stored (0..9 for MNIST and Fashion-MNIST).
  std::vector<int64_t> labels;
};

// Reads the IDX files of `split` ("train" or "t10k") from `dir`:
//   <dir>/<split>-images-idx3-ubyte[.gz]  magic 0x00000803, then count, rows, cols
//   <dir>/<split>-labels-idx1-ubyte[.gz]  magic 0x00000801, then count
// (big-endian uint32 header fields, then unsigned bytes; format:
// http://yann.lecun.com/exdb/mnist/). The gzipped name is tried first, then the
// plain one; either file may be gzipped or not whatever its name says.
// Debian's dataset-fashion-mnist installs the .gz files in
// /usr/share/datasets/fashion-mnist.
//
// Errors name the file and say what was expected and what was found:
//   InvalidArgument  split is neither "train" nor "t10k"; bad magic ("expected
//                    0x00000803, got 0x00000801"); a truncated header or body
//                    ("expected 7840 bytes of pixels, got 5000"); trailing bytes;
//                    a corrupt gzip stream; images and labels with different counts
//                    (naming both files and both counts).
//   NotFound         neither name of a file exists (naming the names tried).
//   other            I/O failures, mapped from errno.
// Memory grows with the bytes actually read, never with a header's claim.
// Thread-compatible; keeps no state.
absl::StatusOr<ImageDataset> LoadIdxDataset(const std::string& dir, std::string_view split);

}  // namespace replicad::client

#endif  // REPLICAD_CLIENT_IDX_DATASET_H_
