#include "server/grpc/wire_request.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/base/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/grpc/wire_varint.h"

namespace replicad {
namespace {

// Wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLength = 2, kStartGroup = 3, kEndGroup = 4,
                   kFixed32 = 5;

constexpr uint32_t Tag(uint32_t field, uint32_t wire_type) { return field << 3 | wire_type; }

// Deeper unknown groups are refused here; protobuf's own limit (100
// nested messages and groups in all) then applies to what is left.
constexpr size_t kMaxGroupDepth = 100;

// Reads a request's wire bytes in order, field by field, copying the fields
// it is not asked to take apart verbatim. Its varint rules are protobuf's
// (parse_context.h of protobuf 3.21), so that whatever it accepts protobuf
// accepts too: tags of at most 5 bytes, lengths of at most 5 bytes and
// below 2 GiB, values of at most 10 bytes.
class WireReader {
 public:
  WireReader(const grpc::ByteBuffer& wire, const char* type)
      : buffer_(wire), reader_(&buffer_), in_(&reader_), type_(type) {}

  absl::Status Start() {
    const size_t bytes = buffer_.Length();
    if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
      return Error("", absl::StrCat("a message of ", bytes, " bytes"), 0);
    }
    if (bytes > 0 && !reader_.status().ok()) {
      return absl::InternalError(
          absl::StrCat("cannot read the request's bytes: ", reader_.status().error_message()));
    }
    in_.PushLimit(static_cast<int>(bytes));
    return absl::OkStatus();
  }

  size_t position() const { return static_cast<size_t>(in_.CurrentPosition()); }
  size_t left() const { return static_cast<size_t>(std::max(0, in_.BytesUntilLimit())); }
  bool AtEnd() const { return in_.BytesUntilLimit() <= 0; }
  google::protobuf::io::CodedInputStream::Limit PushLimit(size_t bytes) {
    return in_.PushLimit(static_cast<int>(bytes));
  }
  void PopLimit(google::protobuf::io::CodedInputStream::Limit limit) { in_.PopLimit(limit); }

  absl::Status Error(absl::string_view where, absl::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat("request is not a valid ", type_, ": ", where,
                                                   where.empty() ? "" : ": ", what, " at byte ",
                                                   at));
  }

  // A field's tag; its bytes are appended to `out`.
  absl::Status ReadTag(absl::string_view where, uint32_t* tag, std::string* out) {
    const size_t at = position();
    uint32_t value = 0;
    for (int i = 0; i < 5; ++i) {
      uint8_t byte;
      if (!ReadByte(&byte)) return Error(where, "truncated tag", at);
      out->push_back(static_cast<char>(byte));
      value |= static_cast<uint32_t>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) {
        if (value == 0) return Error(where, "tag 0 (no field)", at);
        if (value >> 3 == 0) return Error(where, "field number 0", at);
        *tag = value;
        return absl::OkStatus();
      }
    }
    return Error(where, "tag longer than 5 bytes", at);
  }

  // A length prefix, checked against the bytes left in the enclosing
  // message; its bytes are appended to `out` unless null.
  absl::Status ReadLength(absl::string_view where, size_t* length, std::string* out) {
    const size_t at = position();
    uint64_t value = 0;
    for (int i = 0;; ++i) {
      uint8_t byte;
      if (!ReadByte(&byte)) return Error(where, "truncated length", at);
      if (out != nullptr) out->push_back(static_cast<char>(byte));
      if (i == 4 && byte >= 8) return Error(where, "length of 2 GiB or more", at);
      value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) break;
    }
    if (value > left()) {
      return Error(where,
                   absl::StrCat("length ", value, " runs past the end of its message (", left(),
                                " bytes left)"),
                   at);
    }
    *length = static_cast<size_t>(value);
    return absl::OkStatus();
  }

  // `bytes` bytes into `to`.
  absl::Status Read(absl::string_view where, char* to, size_t bytes) {
    const size_t at = position();
    if (bytes > left() || !in_.ReadRaw(to, static_cast<int>(bytes))) {
      return Error(where, absl::StrCat("truncated (", bytes, " bytes expected)"), at);
    }
    return absl::OkStatus();
  }

  // The rest of a field whose tag was just read (and copied), copied to `out`.
  absl::Status CopyField(absl::string_view where, uint32_t tag, std::string* out) {
    switch (tag & 7) {
      case kStartGroup:
        return CopyGroup(where, tag >> 3, out);
      case kEndGroup:
        return Error(where, absl::StrCat("end-group tag of field ", tag >> 3, " without a start"),
                     position());
      default:
        return CopyValue(where, tag, out);
    }
  }

 private:
  bool ReadByte(uint8_t* byte) { return in_.ReadRaw(byte, 1); }

  absl::Status Copy(absl::string_view where, size_t bytes, std::string* out) {
    const size_t old = out->size();
    out->resize(old + bytes);
    return Read(where, out->data() + old, bytes);
  }

  absl::Status CopyValue(absl::string_view where, uint32_t tag, std::string* out) {
    switch (tag & 7) {
      case kVarint: {
        const size_t at = position();
        for (int i = 0; i < 10; ++i) {
          uint8_t byte;
          if (!ReadByte(&byte)) return Error(where, "truncated varint", at);
          out->push_back(static_cast<char>(byte));
          if (byte < 0x80) return absl::OkStatus();
        }
        return Error(where, "varint longer than 10 bytes", at);
      }
      case kFixed64:
        return Copy(where, 8, out);
      case kFixed32:
        return Copy(where, 4, out);
      case kLength: {
        size_t length;
        REPLICAD_RETURN_IF_ERROR(ReadLength(where, &length, out));
        return Copy(where, length, out);
      }
      default:
        return Error(where, absl::StrCat("invalid wire type ", tag & 7, " (field ", tag >> 3, ")"),
                     position());
    }
  }

  // An unknown group: kept, as protobuf keeps it, up to its end-group tag.
  absl::Status CopyGroup(absl::string_view where, uint32_t field, std::string* out) {
    const size_t at = position();
    std::vector<uint32_t> open = {field};
    while (!open.empty()) {
      if (AtEnd()) {
        return Error(where, absl::StrCat("group of field ", open.back(), " not ended"), at);
      }
      uint32_t tag;
      REPLICAD_RETURN_IF_ERROR(ReadTag(where, &tag, out));
      if ((tag & 7) == kEndGroup) {
        if (tag >> 3 != open.back()) {
          return Error(where,
                       absl::StrCat("end-group tag of field ", tag >> 3, " in a group of field ",
                                    open.back()),
                       position());
        }
        open.pop_back();
      } else if ((tag & 7) == kStartGroup) {
        if (open.size() >= kMaxGroupDepth) {
          return Error(where, absl::StrCat("groups nested more than ", kMaxGroupDepth, " deep"),
                       position());
        }
        open.push_back(tag >> 3);
      } else {
        REPLICAD_RETURN_IF_ERROR(CopyValue(where, tag, out));
      }
    }
    return absl::OkStatus();
  }

  grpc::ByteBuffer buffer_;  // A reference to the request's slices, not a copy.
  grpc::ProtoBufferReader reader_;
  google::protobuf::io::CodedInputStream in_;
  const char* const type_;
};

// A bytes field's contents, into a pooled buffer (null when empty).
absl::Status Gather(WireReader& reader, absl::string_view where, size_t bytes, HostBufferPool& pool,
                    std::shared_ptr<HostBuffer>* out) {
  *out = nullptr;  // The last occurrence wins; the earlier buffer goes back first.
  if (bytes == 0) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = pool.Get(bytes);
  if (!buffer.ok()) return buffer.status();
  REPLICAD_RETURN_IF_ERROR(reader.Read(where, (*buffer)->data(), bytes));
  *out = *std::move(buffer);
  return absl::OkStatus();
}

// Walks a nested message of `bytes` bytes with `walk`, then appends it,
// re-encoded, to `out` after `tag` (its original tag bytes).
template <typename Walk>
absl::Status Nested(WireReader& reader, absl::string_view where, const std::string& tag,
                    std::string* out, Walk walk) {
  size_t bytes;
  REPLICAD_RETURN_IF_ERROR(reader.ReadLength(where, &bytes, nullptr));
  const auto limit = reader.PushLimit(bytes);
  std::string inner;
  absl::Status status = walk(&inner);
  reader.PopLimit(limit);
  if (!status.ok()) return status;
  out->append(tag);
  AppendVarint(inner.size(), out);
  out->append(inner);
  return absl::OkStatus();
}

// A walk's way of saying that the request is encoded in a way it leaves to
// protobuf; never returned to callers.
absl::Status NeedsProtobuf() { return absl::AbortedError("left to protobuf"); }
bool IsNeedsProtobuf(const absl::Status& s) { return s.code() == absl::StatusCode::kAborted; }

// Every field of the message until its end, offered first to
// `take(tag, tag_bytes)`, which returns true when it consumed the field;
// the others are copied to `out`.
template <typename Take>
absl::Status Fields(WireReader& reader, absl::string_view where, std::string* out, Take take) {
  while (!reader.AtEnd()) {
    std::string tag_bytes;
    uint32_t tag;
    REPLICAD_RETURN_IF_ERROR(reader.ReadTag(where, &tag, &tag_bytes));
    REPLICAD_ASSIGN_OR_RETURN(bool taken, take(tag, tag_bytes));
    if (taken) continue;
    out->append(tag_bytes);
    REPLICAD_RETURN_IF_ERROR(reader.CopyField(where, tag, out));
  }
  return absl::OkStatus();
}

absl::Status ParseRest(const std::string& rest, google::protobuf::Message* message) {
  if (message->ParseFromString(rest)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "request is not a valid ", message->GetTypeName(),
      ": protobuf refuses its fields (a string that is not UTF-8, or a malformed message in "
      "them)"));
}

// ModelInferRequest's walk: raw_input_contents (7) and, inside inputs (5) ->
// contents (5), packed fp32_contents (6) and int64_contents (3). Returns
// NeedsProtobuf() where the request is not encoded as it expects.
class InferWalk {
 public:
  InferWalk(WireReader& reader, HostBufferPool& pool, WireInferRequest* out)
      : reader_(reader), pool_(pool), out_(out) {}

  absl::Status Request(std::string* rest) {
    return Fields(reader_, "", rest,
                  [&](uint32_t tag, const std::string& tag_bytes) -> absl::StatusOr<bool> {
                    return Top(tag, tag_bytes, rest);
                  });
  }

 private:
  absl::StatusOr<bool> Top(uint32_t tag, const std::string& tag_bytes, std::string* rest) {
    if (tag == Tag(7, kLength)) {
      const std::string where =
          absl::StrCat("raw_input_contents[", out_->raw_input_contents.size(), "]");
      size_t bytes;
      REPLICAD_RETURN_IF_ERROR(reader_.ReadLength(where, &bytes, nullptr));
      std::shared_ptr<HostBuffer>& raw = out_->raw_input_contents.emplace_back();
      REPLICAD_RETURN_IF_ERROR(Gather(reader_, where, bytes, pool_, &raw));
      return true;
    }
    if (tag != Tag(5, kLength)) return false;
    const std::string where = absl::StrCat("inputs[", out_->fp32_contents.size(), "]");
    out_->fp32_contents.emplace_back();
    out_->int64_contents.emplace_back();
    seen_fp32_ = seen_int64_ = false;
    absl::Status s = Nested(reader_, where, tag_bytes, rest, [&](std::string* input) {
      return Fields(reader_, where, input,
                    [&](uint32_t tag, const std::string& tag_bytes) -> absl::StatusOr<bool> {
                      return Input(where, tag, tag_bytes, input);
                    });
    });
    if (!s.ok()) return s;
    return true;
  }

  absl::StatusOr<bool> Input(const std::string& where, uint32_t tag, const std::string& tag_bytes,
                             std::string* input) {
    if (tag != Tag(5, kLength)) return false;
    const std::string contents_where = where + ".contents";
    absl::Status s = Nested(reader_, contents_where, tag_bytes, input, [&](std::string* contents) {
      return Fields(reader_, contents_where, contents,
                    [&](uint32_t tag, const std::string&) -> absl::StatusOr<bool> {
                      return Contents(contents_where, tag);
                    });
    });
    if (!s.ok()) return s;
    return true;
  }

  absl::StatusOr<bool> Contents(const std::string& where, uint32_t tag) {
    const uint32_t field = tag >> 3;
    if (field != 6 && field != 3) return false;
    const uint32_t loose = field == 6 ? kFixed32 : kVarint;
    bool& seen = field == 6 ? seen_fp32_ : seen_int64_;
    // Loose elements, or a second run (protobuf concatenates them): rare
    // enough to leave to protobuf. Any other wire type makes an unknown
    // field of it, as for protobuf.
    if ((tag & 7) == loose || ((tag & 7) == kLength && seen)) return NeedsProtobuf();
    if ((tag & 7) != kLength) return false;
    seen = true;
    const std::string field_where = where + (field == 6 ? ".fp32_contents" : ".int64_contents");
    size_t bytes;
    REPLICAD_RETURN_IF_ERROR(reader_.ReadLength(field_where, &bytes, nullptr));
    if (field == 3) {
      REPLICAD_RETURN_IF_ERROR(Int64s(field_where, bytes, &out_->int64_contents.back()));
      return true;
    }
    if (bytes % sizeof(float) != 0) {
      return reader_.Error(
          field_where,
          absl::StrCat("a packed run of ", bytes, " bytes is not a whole number of floats"),
          reader_.position());
    }
    REPLICAD_RETURN_IF_ERROR(
        Gather(reader_, field_where, bytes, pool_, &out_->fp32_contents.back()));
    return true;
  }

  // A packed run of `bytes` bytes of varints, decoded as protobuf decodes
  // them (at most 10 bytes each, the value's low 64 bits).
  absl::Status Int64s(const std::string& where, size_t bytes, std::shared_ptr<HostBuffer>* out) {
    const size_t at = reader_.position();
    std::shared_ptr<HostBuffer> packed;
    REPLICAD_RETURN_IF_ERROR(Gather(reader_, where, bytes, pool_, &packed));
    const absl::string_view run = BytesOf(packed);
    if (!run.empty() && static_cast<uint8_t>(run.back()) >= 0x80) {
      return reader_.Error(where, "packed run ends inside a varint", at);
    }
    size_t count = 0;
    for (char c : run) count += static_cast<uint8_t>(c) < 0x80;
    if (count == 0) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<HostBuffer>> values = pool_.Get(count * sizeof(int64_t));
    if (!values.ok()) return values.status();
    char* to = (*values)->data();
    uint64_t value = 0;
    int length = 0;
    for (char c : run) {
      const auto byte = static_cast<uint8_t>(c);
      if (length == 10) return reader_.Error(where, "varint longer than 10 bytes", at);
      value |= static_cast<uint64_t>(byte & 0x7f) << (7 * length++);
      if (byte < 0x80) {
        std::memcpy(to, &value, sizeof(value));
        to += sizeof(value);
        value = 0;
        length = 0;
      }
    }
    *out = *std::move(values);
    return absl::OkStatus();
  }

  WireReader& reader_;
  HostBufferPool& pool_;
  WireInferRequest* const out_;
  bool seen_fp32_ = false, seen_int64_ = false;  // In the current input.
};

// A field of a message protobuf parsed, copied into a pooled buffer.
absl::StatusOr<std::shared_ptr<HostBuffer>> Pooled(HostBufferPool& pool, const void* data,
                                                   size_t bytes) {
  if (bytes == 0) return nullptr;
  absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = pool.Get(bytes);
  if (!buffer.ok()) return buffer.status();
  std::memcpy((*buffer)->data(), data, bytes);
  return buffer;
}

// The slow path for encodings InferWalk leaves to protobuf.
absl::StatusOr<WireInferRequest> ParseWithProtobuf(const grpc::ByteBuffer& wire,
                                                   HostBufferPool& pool) {
  WireInferRequest out;
  grpc::ByteBuffer buffer(wire);
  grpc::ProtoBufferReader reader(&buffer);
  if (!out.message.ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        "request is not a valid inference.ModelInferRequest: protobuf refuses it");
  }
  for (const std::string& raw : out.message.raw_input_contents()) {
    absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = Pooled(pool, raw.data(), raw.size());
    if (!buffer.ok()) return buffer.status();
    out.raw_input_contents.push_back(*std::move(buffer));
  }
  out.message.clear_raw_input_contents();
  for (inference::ModelInferRequest::InferInputTensor& input : *out.message.mutable_inputs()) {
    std::shared_ptr<HostBuffer>& fp32 = out.fp32_contents.emplace_back();
    std::shared_ptr<HostBuffer>& int64 = out.int64_contents.emplace_back();
    if (!input.has_contents()) continue;
    inference::InferTensorContents* contents = input.mutable_contents();
    absl::StatusOr<std::shared_ptr<HostBuffer>> pooled = Pooled(
        pool, contents->fp32_contents().data(), contents->fp32_contents_size() * sizeof(float));
    if (!pooled.ok()) return pooled.status();
    fp32 = *std::move(pooled);
    pooled = Pooled(pool, contents->int64_contents().data(),
                    contents->int64_contents_size() * sizeof(int64_t));
    if (!pooled.ok()) return pooled.status();
    int64 = *std::move(pooled);
    contents->clear_fp32_contents();
    contents->clear_int64_contents();
  }
  return out;
}

}  // namespace

absl::StatusOr<WirePredictRequest> ReadPredictRequest(const grpc::ByteBuffer& wire,
                                                      HostBufferPool& pool) {
  WireReader reader(wire, "replicad.v1.PredictRequest");
  REPLICAD_RETURN_IF_ERROR(reader.Start());
  WirePredictRequest out;
  std::string rest;
  // inputs (2) -> raw (4).
  absl::Status walked = Fields(
      reader, "", &rest, [&](uint32_t tag, const std::string& tag_bytes) -> absl::StatusOr<bool> {
        if (tag != Tag(2, kLength)) return false;
        const std::string where = absl::StrCat("inputs[", out.raw.size(), "]");
        std::shared_ptr<HostBuffer>& raw = out.raw.emplace_back();
        absl::Status s = Nested(reader, where, tag_bytes, &rest, [&](std::string* tensor) {
          return Fields(reader, where, tensor,
                        [&](uint32_t tag, const std::string&) -> absl::StatusOr<bool> {
                          if (tag != Tag(4, kLength)) return false;
                          const std::string raw_where = where + ".raw";
                          size_t bytes;
                          absl::Status s = reader.ReadLength(raw_where, &bytes, nullptr);
                          if (s.ok()) s = Gather(reader, raw_where, bytes, pool, &raw);
                          if (!s.ok()) return s;
                          return true;
                        });
        });
        if (!s.ok()) return s;
        return true;
      });
  if (!walked.ok()) return walked;
  REPLICAD_RETURN_IF_ERROR(ParseRest(rest, &out.message));
  return out;
}

absl::StatusOr<WireInferRequest> ReadModelInferRequest(const grpc::ByteBuffer& wire,
                                                       HostBufferPool& pool) {
  WireReader reader(wire, "inference.ModelInferRequest");
  REPLICAD_RETURN_IF_ERROR(reader.Start());
  WireInferRequest out;
  std::string rest;
  absl::Status walked = InferWalk(reader, pool, &out).Request(&rest);
  if (IsNeedsProtobuf(walked)) return ParseWithProtobuf(wire, pool);
  if (!walked.ok()) return walked;
  REPLICAD_RETURN_IF_ERROR(ParseRest(rest, &out.message));
  return out;
}

}  // namespace replicad
