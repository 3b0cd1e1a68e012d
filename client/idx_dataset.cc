#include "client/idx_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace replicad::client {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // Unsigned bytes, 3 dimensions.
constexpr uint32_t kLabelsMagic = 0x00000801;  // Unsigned bytes, 1 dimension.
// gzread takes an unsigned count and returns an int; reading in chunks also
// keeps memory in step with what the file really holds.
constexpr size_t kChunkBytes = size_t{1} << 20;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

struct IdxFile {
  std::string path;
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
};

// zlib's reason for the last failure, or "" when there is none (a plain end of file).
std::string GzReason(gzFile file) {
  int errnum = Z_OK;
  const char* message = gzerror(file, &errnum);
  if (errnum == Z_OK || message == nullptr || *message == '\0') return "";
  return absl::StrCat(" (", message, ")");
}

// Appends up to `n` bytes to `out`; fewer only at the end of the data.
absl::StatusOr<size_t> ReadUpTo(gzFile file, const std::string& path, size_t n,
                                std::vector<uint8_t>* out) {
  size_t got = 0;
  while (got < n) {
    const size_t want = std::min(kChunkBytes, n - got);
    const size_t old_size = out->size();
    out->resize(old_size + want);
    const int read = gzread(file, out->data() + old_size, static_cast<unsigned>(want));
    if (read < 0) {
      out->resize(old_size);
      return absl::InvalidArgumentError(absl::StrCat(path, ": corrupt gzip data", GzReason(file)));
    }
    out->resize(old_size + static_cast<size_t>(read));
    got += static_cast<size_t>(read);
    if (static_cast<size_t>(read) < want) break;
  }
  return got;
}

absl::Status ReadExactly(gzFile file, const std::string& path, size_t n, const char* what,
                         std::vector<uint8_t>* out) {
  absl::StatusOr<size_t> got = ReadUpTo(file, path, n, out);
  if (!got.ok()) return got.status();
  if (*got < n) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: expected ", n, " bytes of ",
                                                   what, ", got ", *got, GzReason(file)));
  }
  return absl::OkStatus();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The first of `names` that exists, opened. gzopen reads plain files as they
// are, so one path serves both.
absl::StatusOr<std::pair<GzFile, std::string>> OpenFirst(const std::string& dir,
                                                         const std::vector<std::string>& names) {
  std::vector<std::string> tried;
  for (const std::string& name : names) {
    std::string path = (std::filesystem::path(dir) / name).string();
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      tried.push_back(std::move(path));
      continue;
    }
    errno = 0;
    GzFile file(gzopen(path.c_str(), "rb"));
    if (file == nullptr) {
      // gzopen leaves errno at 0 when it fails for want of memory.
      if (errno == 0) return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot open"));
      return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
    }
    return std::make_pair(std::move(file), std::move(path));
  }
  return absl::NotFoundError(
      absl::StrCat(tried.front(), ": no such file (nor ", tried.back(), ")"));
}

absl::StatusOr<IdxFile> ReadIdx(const std::string& dir, const std::string& stem,
                                uint32_t expected_magic, int rank, const char* what) {
  absl::StatusOr<std::pair<GzFile, std::string>> opened = OpenFirst(dir, {stem + ".gz", stem});
  if (!opened.ok()) return opened.status();
  gzFile file = opened->first.get();
  IdxFile idx;
  idx.path = std::move(opened->second);
  gzbuffer(file, 1 << 18);

  // The magic first and alone, so that the wrong kind of file reads as such
  // rather than as a truncated header.
  std::vector<uint8_t> header;
  if (absl::Status s = ReadExactly(file, idx.path, 4, "magic number", &header); !s.ok()) return s;
  const uint32_t magic = BigEndian32(header.data());
  if (magic != expected_magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad magic number: expected 0x%08X (%s), got 0x%08X", idx.path, expected_magic,
        rank == 3 ? "unsigned byte images, 3 dimensions" : "unsigned byte labels, 1 dimension",
        magic));
  }
  header.clear();
  if (absl::Status s =
          ReadExactly(file, idx.path, 4 * static_cast<size_t>(rank), "dimensions", &header);
      !s.ok()) {
    return s;
  }
  // Three uint32 dims multiply to less than 2^96; stop at what a vector can hold.
  size_t total = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t dim = BigEndian32(header.data() + 4 * i);
    idx.dims.push_back(dim);
    if (dim != 0 && total > std::numeric_limits<int64_t>::max() / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(idx.path, ": dimensions too large: the product overflows int64"));
    }
    total *= dim;
  }
  if (absl::Status s = ReadExactly(file, idx.path, total, what, &idx.data); !s.ok()) return s;
  std::vector<uint8_t> extra;
  absl::StatusOr<size_t> trailing = ReadUpTo(file, idx.path, 1, &extra);
  if (!trailing.ok()) return trailing.status();
  if (*trailing != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        idx.path, ": trailing data: expected ", 4 + 4 * rank + total, " bytes in all, found more"));
  }
  return idx;
}

}  // namespace

absl::StatusOr<ImageDataset> LoadIdxDataset(const std::string& dir, std::string_view split) {
  if (split != "train" && split != "t10k") {
    return absl::InvalidArgumentError(
        absl::StrCat("split '", std::string(split), "': expected \"train\" or \"t10k\""));
  }
  absl::StatusOr<IdxFile> images = ReadIdx(
      dir, absl::StrCat(std::string(split), "-images-idx3-ubyte"), kImagesMagic, 3, "pixels");
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxFile> labels = ReadIdx(
      dir, absl::StrCat(std::string(split), "-labels-idx1-ubyte"), kLabelsMagic, 1, "labels");
  if (!labels.ok()) return labels.status();
  if (images->dims[0] != labels->dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(images->path, " holds ", images->dims[0], " images but ", labels->path,
                     " holds ", labels->dims[0], " labels: expected equal counts"));
  }

  ImageDataset dataset;
  dataset.count = images->dims[0];
  dataset.rows = images->dims[1];
  dataset.cols = images->dims[2];
  dataset.images.resize(images->data.size());
  for (size_t i = 0; i < images->data.size(); ++i) {
    dataset.images[i] = static_cast<float>(images->data[i]) / 255.0f;
  }
  dataset.labels.assign(labels->data.begin(), labels->data.end());
  return dataset;
}

}  // namespace replicad::client
