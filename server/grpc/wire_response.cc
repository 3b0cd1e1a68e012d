#include "server/grpc/wire_response.h"

#include <string>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/slice.h"
#include "server/grpc/wire_varint.h"

namespace replicad {
namespace {

using google::protobuf::io::CodedOutputStream;

// Below this, a tensor's bytes are copied into the slice before them.
constexpr size_t kBorrowFrom = 4096;

// A length-delimited field's tag and length.
void AppendHeader(uint32_t field, uint64_t length, std::string* out) {
  AppendVarint(field << 3 | 2, out);
  AppendVarint(length, out);
}

// Bytes of a bytes field: the header, then the buffer (a field of its own;
// its length is the buffer's size).
size_t FieldSize(uint32_t field, size_t bytes) {
  return CodedOutputStream::VarintSize32(field << 3 | 2) + CodedOutputStream::VarintSize64(bytes) +
         bytes;
}

void DropBuffer(void* holder) { delete static_cast<std::shared_ptr<HostBuffer>*>(holder); }

// The response's slices: runs of copied bytes and borrowed buffers.
class Slices {
 public:
  std::string* text() { return &text_; }

  void Borrow(const std::shared_ptr<HostBuffer>& buffer) {
    if (buffer == nullptr) return;
    if (buffer->size() < kBorrowFrom) {
      text_.append(buffer->data(), buffer->size());
      return;
    }
    FlushText();
    slices_.emplace_back(buffer->data(), buffer->size(), &DropBuffer,
                         new std::shared_ptr<HostBuffer>(buffer));
  }

  grpc::ByteBuffer Finish() {
    FlushText();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  void FlushText() {
    if (text_.empty()) return;
    slices_.emplace_back(text_);
    text_.clear();
  }

  std::string text_;
  std::vector<grpc::Slice> slices_;
};

}  // namespace

grpc::ByteBuffer EncodePredictResponse(const v1::PredictResponse& head,
                                       absl::Span<const std::shared_ptr<HostBuffer>> raw) {
  // In field order, as protobuf writes it: model (1), outputs (2), slices (3).
  Slices out;
  v1::PredictResponse part;
  part.set_model(head.model());
  part.AppendToString(out.text());
  for (int i = 0; i < head.outputs_size(); ++i) {
    const std::string tensor = head.outputs(i).SerializeAsString();
    const size_t bytes = BytesOf(raw[i]).size();
    constexpr uint32_t kOutputs = 2, kRaw = 4;
    AppendHeader(kOutputs, tensor.size() + (bytes > 0 ? FieldSize(kRaw, bytes) : 0), out.text());
    out.text()->append(tensor);
    if (bytes == 0) continue;
    AppendHeader(kRaw, bytes, out.text());
    out.Borrow(raw[i]);
  }
  part.Clear();
  *part.mutable_slices() = head.slices();
  part.AppendToString(out.text());
  return out.Finish();
}

grpc::ByteBuffer EncodeModelInferResponse(
    const inference::ModelInferResponse& head,
    absl::Span<const std::shared_ptr<HostBuffer>> raw_output_contents) {
  // raw_output_contents is the last field (6), so this is protobuf's order.
  Slices out;
  head.AppendToString(out.text());
  for (const std::shared_ptr<HostBuffer>& raw : raw_output_contents) {
    constexpr uint32_t kRawOutputContents = 6;
    AppendHeader(kRawOutputContents, BytesOf(raw).size(), out.text());
    out.Borrow(raw);
  }
  return out.Finish();
}

}  // namespace replicad
