#ifndef REPLICAD_TESTS_SERVER_GRPC_WIRE_TEST_UTIL_H_
#define REPLICAD_TESTS_SERVER_GRPC_WIRE_TEST_UTIL_H_

// Protobuf wire bytes written by hand (for encodings protobuf itself never
// writes) and gRPC byte buffers cut into slices, for the wire tests.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace replicad::testing {

inline std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}
inline std::string Tag(uint32_t field, uint32_t wire_type) {
  return Varint(uint64_t{field} << 3 | wire_type);
}
inline std::string VarintField(uint32_t field, uint64_t value) {
  return Tag(field, 0) + Varint(value);
}
inline std::string LengthField(uint32_t field, const std::string& payload) {
  return Tag(field, 2) + Varint(payload.size()) + payload;
}
inline std::string Fixed32Field(uint32_t field, uint32_t value) {
  std::string out = Tag(field, 5);
  out.append(reinterpret_cast<const char*>(&value), 4);
  return out;
}
inline std::string Fixed64Field(uint32_t field, uint64_t value) {
  std::string out = Tag(field, 1);
  out.append(reinterpret_cast<const char*>(&value), 8);
  return out;
}
inline std::string GroupField(uint32_t field, const std::string& inside) {
  return Tag(field, 3) + inside + Tag(field, 4);
}

// `bytes` as gRPC hands a request to a raw method: in slices, here cut at
// random places (some of a single byte).
inline grpc::ByteBuffer Sliced(const std::string& bytes, std::mt19937& rng) {
  std::vector<size_t> cuts = {0, bytes.size()};
  const size_t pieces = bytes.empty() ? 0 : rng() % 6;
  for (size_t i = 0; i < pieces; ++i) cuts.push_back(rng() % (bytes.size() + 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<grpc::Slice> slices;
  for (size_t i = 1; i < cuts.size(); ++i) {
    if (cuts[i] > cuts[i - 1])
      slices.emplace_back(bytes.data() + cuts[i - 1], cuts[i] - cuts[i - 1]);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// A byte buffer's bytes, joined.
inline std::string Joined(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (buffer.Valid() && buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// Serialized with map entries in key order, so that equal messages compare
// equal as bytes (unknown fields included).
inline std::string Canonical(const google::protobuf::Message& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_SERVER_GRPC_WIRE_TEST_UTIL_H_
