#ifndef REPLICAD_CORE_TRAIN_BYTE_FRAME_H_
#define REPLICAD_CORE_TRAIN_BYTE_FRAME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor/tensor.h"

namespace replicad {

// The messages ranks of one job send each other (commands, a step's sums):
// fixed-size scalars in host byte order (every rank of a job runs the same
// build on the same architecture) and length-prefixed strings, floats and
// tensors. Not a wire format for anyone else.
class FrameWriter {
 public:
  void Int64(int64_t value);
  void Double(double value);
  void String(absl::string_view bytes);
  void Floats(const std::vector<float>& values);
  // Host tensor: dtype, shape, bytes.
  void HostTensor(const Tensor& tensor);
  void Status(const absl::Status& status);
  const std::string& bytes() const { return bytes_; }
  std::string Take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

// Reads what a FrameWriter wrote, in the same order. Every read fails
// (InvalidArgument naming `what` and the offset) rather than read past the
// end or accept a tensor whose bytes do not match its shape.
class FrameReader {
 public:
  explicit FrameReader(absl::string_view bytes) : bytes_(bytes) {}
  absl::StatusOr<int64_t> Int64(absl::string_view what);
  absl::StatusOr<double> Double(absl::string_view what);
  absl::StatusOr<std::string> String(absl::string_view what);
  absl::StatusOr<std::vector<float>> Floats(absl::string_view what);
  absl::StatusOr<Tensor> HostTensor(absl::string_view what);
  // The status written (OK included); fails only when the frame is short.
  absl::StatusOr<absl::Status> Status(absl::string_view what);
  bool done() const { return offset_ == bytes_.size(); }

 private:
  absl::Status Take(void* out, size_t size, absl::string_view what);
  absl::string_view bytes_;
  size_t offset_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_BYTE_FRAME_H_
