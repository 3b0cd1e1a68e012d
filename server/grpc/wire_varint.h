#ifndef REPLICAD_SERVER_GRPC_WIRE_VARINT_H_
#define REPLICAD_SERVER_GRPC_WIRE_VARINT_H_

#include <cstdint>
#include <string>

#include "google/protobuf/io/coded_stream.h"

namespace replicad {

// Appends `value` to `out` as a protobuf base-128 varint (the wire format's
// encoding of tags, lengths and integer fields), through protobuf's own writer.
inline void AppendVarint(uint64_t value, std::string* out) {
  uint8_t bytes[10];  // A 64-bit varint is at most 10 bytes.
  const uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(value, bytes);
  out->append(reinterpret_cast<const char*>(bytes), end - bytes);
}

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_WIRE_VARINT_H_
