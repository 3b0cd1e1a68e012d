#ifndef REPLICAD_SERVER_GRPC_WIRE_REQUEST_H_
#define REPLICAD_SERVER_GRPC_WIRE_REQUEST_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "inference/grpc_service.pb.h"
#include "replicad/v1/replicad.pb.h"
#include "server/host_buffer_pool.h"

namespace replicad {

// The gRPC doors' large requests, read from their wire bytes. gRPC hands a
// raw method the request as a list of slices (HTTP/2 frames, up to 64 KiB
// each); protobuf would copy every bytes field into a fresh string (and grow
// packed floats by doubling). These walk the message instead: each tensor
// field is copied once, into a buffer of `pool`, and everything else is
// re-encoded unchanged into a small string that the generated message then
// parses. The result means what protobuf's own parse means (the last of a
// repeated singular field wins, unknown fields are kept, fields may come in
// any order), with the tensor bytes held apart.
//
// Errors: InvalidArgument "request is not a valid <type>: <where>: <what> at
// byte N" for whatever protobuf would refuse (a truncated varint or tag, a
// length past the end of its message, wire type 6 or 7, an unmatched group,
// field number 0, a string that is not UTF-8, ...); a length is checked
// against the bytes left before any buffer is taken for it. ResourceExhausted
// when the pool cannot allocate. Thread-safe (as `pool` is).

struct WirePredictRequest {
  v1::PredictRequest message;  // Every input's raw is empty here...
  // ...and is here instead: raw[i] is inputs(i).raw (null where empty).
  std::vector<std::shared_ptr<HostBuffer>> raw;
};
absl::StatusOr<WirePredictRequest> ReadPredictRequest(const grpc::ByteBuffer& wire,
                                                      HostBufferPool& pool);

struct WireInferRequest {
  // Without raw_input_contents, and with no input's contents holding
  // fp32_contents or int64_contents; those are below.
  inference::ModelInferRequest message;
  // One per entry of the request (null: an empty entry).
  std::vector<std::shared_ptr<HostBuffer>> raw_input_contents;
  // Per input: its fp32_contents as floats, its int64_contents as int64s
  // (null: none).
  std::vector<std::shared_ptr<HostBuffer>> fp32_contents;
  std::vector<std::shared_ptr<HostBuffer>> int64_contents;
};
// Packed fp32_contents and int64_contents (one run per input, as protobuf
// writes them) are gathered on the way; any other encoding of them (loose
// elements, several runs, which protobuf concatenates) makes the request
// take protobuf's own parse, and then the same split.
absl::StatusOr<WireInferRequest> ReadModelInferRequest(const grpc::ByteBuffer& wire,
                                                       HostBufferPool& pool);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_WIRE_REQUEST_H_
