#include "core/serve/sequence_buckets.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace replicad {
namespace {

// Whether the model leaves dim 1 of `spec` open: the sequence dim.
bool OpenSequenceDim(const TensorSpec& spec) {
  return spec.type.shape.size() >= 2 && spec.type.shape[1] == kAnyDim;
}

}  // namespace

std::unique_ptr<SequenceBucketPadding> SequenceBucketPadding::For(
    const Model& model, const std::vector<Tensor>& inputs, const std::vector<int64_t>& buckets,
    OutputSink* answer) {
  if (buckets.empty() || inputs.size() != model.inputs().size()) return nullptr;
  int64_t length = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!OpenSequenceDim(model.inputs()[i]) || inputs[i].rank() < 2) continue;
    if (length >= 0 && inputs[i].shape()[1] != length) return nullptr;
    length = inputs[i].shape()[1];
  }
  auto bucket = std::lower_bound(buckets.begin(), buckets.end(), length);
  if (length < 0 || bucket == buckets.end() || *bucket == length) return nullptr;
  std::unique_ptr<SequenceBucketPadding> padding(
      new SequenceBucketPadding(model, answer, length, *bucket));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!OpenSequenceDim(model.inputs()[i]) || input.rank() < 2) {
      padding->inputs_.push_back(input);
      continue;
    }
    Shape shape = input.shape();
    shape[1] = padding->bucket_;
    Tensor padded;
    try {
      padded = Tensor::Host(input.dtype(), shape);
    } catch (const std::bad_alloc&) {
      return nullptr;  // The request runs as it came; the queue's byte bound still applies.
    }
    // [rows, L, inner...] into [rows, B, inner...], zeros after each row's L.
    const size_t rows = static_cast<size_t>(shape[0]);
    const size_t row_in = input.byte_size() / std::max<size_t>(rows, 1);
    const size_t row_out = padded.byte_size() / std::max<size_t>(rows, 1);
    const char* from = static_cast<const char*>(input.raw_data());
    char* to = static_cast<char*>(padded.raw_data());
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(to + r * row_out, from + r * row_in, row_in);
      std::memset(to + r * row_out + row_in, 0, row_out - row_in);
    }
    padding->inputs_.push_back(std::move(padded));
  }
  return padding;
}

absl::StatusOr<void*> SequenceBucketPadding::Allocate(int index, const TensorType& type) {
  const bool cut = index >= 0 && static_cast<size_t>(index) < model_.outputs().size() &&
                   OpenSequenceDim(model_.outputs()[index]) && type.shape.size() >= 2 &&
                   type.shape[1] == bucket_;
  if (!cut) return answer_->Allocate(index, type);
  TensorType answered = type;
  answered.shape[1] = length_;
  absl::StatusOr<void*> to = answer_->Allocate(index, answered);
  if (!to.ok()) return to.status();
  cuts_.push_back(Cut{Tensor::Host(type.dtype, type.shape), *to});
  return cuts_.back().padded.raw_data();
}

void SequenceBucketPadding::CutOutputs() {
  for (const Cut& cut : cuts_) {
    const size_t rows = static_cast<size_t>(cut.padded.shape()[0]);
    const size_t row_in = cut.padded.byte_size() / std::max<size_t>(rows, 1);
    const size_t row_out = row_in / static_cast<size_t>(bucket_) * static_cast<size_t>(length_);
    const char* from = static_cast<const char*>(cut.padded.raw_data());
    char* to = static_cast<char*>(cut.answer);
    for (size_t r = 0; r < rows; ++r) std::memcpy(to + r * row_out, from + r * row_in, row_out);
  }
}

}  // namespace replicad
