#include "core/train/byte_frame.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/tensor/shape.h"

namespace replicad {
namespace {

// More dimensions than any tensor the engine computes with.
constexpr int64_t kMaxRank = 16;

}  // namespace

void FrameWriter::Int64(int64_t value) {
  bytes_.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void FrameWriter::Double(double value) {
  bytes_.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void FrameWriter::String(absl::string_view bytes) {
  Int64(static_cast<int64_t>(bytes.size()));
  bytes_.append(bytes.data(), bytes.size());
}

void FrameWriter::Floats(const std::vector<float>& values) {
  String(absl::string_view(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(float)));
}

void FrameWriter::HostTensor(const Tensor& tensor) {
  Int64(static_cast<int64_t>(tensor.dtype()));
  Int64(static_cast<int64_t>(tensor.shape().size()));
  for (int64_t d : tensor.shape()) Int64(d);
  String(absl::string_view(static_cast<const char*>(tensor.raw_data()), tensor.byte_size()));
}

void FrameWriter::Status(const absl::Status& status) {
  Int64(static_cast<int64_t>(status.code()));
  String(status.message());
}

absl::Status FrameReader::Take(void* out, size_t size, absl::string_view what) {
  if (bytes_.size() - offset_ < size) {
    return absl::InvalidArgumentError(absl::StrCat("rank message: ", what, ": needs ", size,
                                                   " bytes at offset ", offset_, " of ",
                                                   bytes_.size()));
  }
  std::memcpy(out, bytes_.data() + offset_, size);
  offset_ += size;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FrameReader::Int64(absl::string_view what) {
  int64_t value = 0;
  REPLICAD_RETURN_IF_ERROR(Take(&value, sizeof(value), what));
  return value;
}

absl::StatusOr<double> FrameReader::Double(absl::string_view what) {
  double value = 0;
  REPLICAD_RETURN_IF_ERROR(Take(&value, sizeof(value), what));
  return value;
}

absl::StatusOr<std::string> FrameReader::String(absl::string_view what) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t size, Int64(what));
  if (size < 0 || static_cast<uint64_t>(size) > bytes_.size() - offset_) {
    return absl::InvalidArgumentError(absl::StrCat("rank message: ", what, ": length ", size,
                                                   " at offset ", offset_, " of ", bytes_.size()));
  }
  std::string value(bytes_.substr(offset_, static_cast<size_t>(size)));
  offset_ += static_cast<size_t>(size);
  return value;
}

absl::StatusOr<std::vector<float>> FrameReader::Floats(absl::string_view what) {
  absl::StatusOr<std::string> bytes = String(what);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank message: ", what, ": ", bytes->size(), " bytes are not whole floats"));
  }
  std::vector<float> values(bytes->size() / sizeof(float));
  std::memcpy(values.data(), bytes->data(), bytes->size());
  return values;
}

absl::StatusOr<Tensor> FrameReader::HostTensor(absl::string_view what) {
  absl::StatusOr<int64_t> dtype = Int64(what);
  if (!dtype.ok()) return dtype.status();
  if (*dtype != static_cast<int64_t>(DType::kFloat32) &&
      *dtype != static_cast<int64_t>(DType::kInt64)) {
    return absl::InvalidArgumentError(absl::StrCat("rank message: ", what, ": dtype ", *dtype));
  }
  absl::StatusOr<int64_t> rank = Int64(what);
  if (!rank.ok()) return rank.status();
  if (*rank < 0 || *rank > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("rank message: ", what, ": rank ", *rank));
  }
  Shape shape;
  for (int64_t d = 0; d < *rank; ++d) {
    REPLICAD_ASSIGN_OR_RETURN(int64_t dim, Int64(what));
    shape.push_back(dim);
  }
  absl::StatusOr<std::string> bytes = String(what);
  if (!bytes.ok()) return bytes.status();
  const std::optional<size_t> expected = CheckedByteSize(static_cast<DType>(*dtype), shape);
  if (!expected || *expected != bytes->size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank message: ", what, ": ", bytes->size(),
                                                   " bytes for shape ", ShapeToString(shape)));
  }
  Tensor tensor = Tensor::Host(static_cast<DType>(*dtype), std::move(shape));
  if (!bytes->empty()) std::memcpy(tensor.raw_data(), bytes->data(), bytes->size());
  return tensor;
}

absl::StatusOr<absl::Status> FrameReader::Status(absl::string_view what) {
  REPLICAD_ASSIGN_OR_RETURN(int64_t code, Int64(what));
  absl::StatusOr<std::string> message = String(what);
  if (!message.ok()) return message.status();
  if (code == 0) return absl::OkStatus();
  // An unknown number reads as Unknown rather than failing the frame.
  const auto status_code =
      (code > 0 && code <= 16) ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
  return absl::Status(status_code, *message);
}

}  // namespace replicad
