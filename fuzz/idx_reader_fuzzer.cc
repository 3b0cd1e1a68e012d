// Feeds a pair of IDX files (gzipped or not) to client::LoadIdxDataset, the
// (Fashion-)MNIST reader of `replicactl train`. Input: a 4-byte big-endian
// length N, then N bytes of train-images-idx3-ubyte, then the rest as
// train-labels-idx1-ubyte (written to a temporary directory each run).
// Asserts: a refusal is InvalidArgument; a loaded dataset has `count` labels
// and count * rows * cols pixels, each in [0, 1] (a byte / 255).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/idx_dataset.h"
#include "fuzz/fuzz_check.h"

namespace {

const std::string& Directory() {
  static const std::string* dir =
      new std::string(replicad::fuzz::NewTempDirectory("replicad-idx-fuzz"));
  return *dir;
}

void Write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) replicad::fuzz::Violated(absl::StrCat("cannot write ", path));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using replicad::fuzz::Violated;
  if (size < 4) return 0;
  const size_t images =
      std::min<size_t>(size - 4, (uint32_t{data[0]} << 24) | (uint32_t{data[1]} << 16) |
                                     (uint32_t{data[2]} << 8) | uint32_t{data[3]});
  const std::string& dir = Directory();
  Write(dir + "/train-images-idx3-ubyte", data + 4, images);
  Write(dir + "/train-labels-idx1-ubyte", data + 4 + images, size - 4 - images);
  absl::StatusOr<replicad::client::ImageDataset> dataset =
      replicad::client::LoadIdxDataset(dir, "train");
  if (!dataset.ok()) {
    if (dataset.status().code() != absl::StatusCode::kInvalidArgument) {
      Violated(absl::StrCat("LoadIdxDataset failed with ", dataset.status().ToString()));
    }
    return 0;
  }
  if (dataset->count < 0 || dataset->rows < 0 || dataset->cols < 0) Violated("negative dims");
  if (static_cast<int64_t>(dataset->labels.size()) != dataset->count) {
    Violated(absl::StrCat(dataset->labels.size(), " labels for count ", dataset->count));
  }
  if (static_cast<uint64_t>(dataset->images.size()) !=
      static_cast<uint64_t>(dataset->count) * dataset->rows * dataset->cols) {
    Violated(absl::StrCat(dataset->images.size(), " pixels for ", dataset->count, "x",
                          dataset->rows, "x", dataset->cols));
  }
  for (float pixel : dataset->images) {
    if (!(pixel >= 0.0f && pixel <= 1.0f)) Violated(absl::StrCat("pixel ", pixel));
  }
  for (int64_t label : dataset->labels) {
    if (label < 0 || label > 255) Violated(absl::StrCat("label ", label));
  }
  return 0;
}
