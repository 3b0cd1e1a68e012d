#ifndef REPLICAD_SERVER_GRPC_WIRE_RESPONSE_H_
#define REPLICAD_SERVER_GRPC_WIRE_RESPONSE_H_

#include <memory>

#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "inference/grpc_service.pb.h"
#include "replicad/v1/replicad.pb.h"
#include "server/host_buffer_pool.h"

namespace replicad {

// The gRPC doors' answers with their tensor bytes borrowed, not copied: the
// message's other fields are serialized by protobuf, each tensor's field
// header is written by hand, and the tensor bytes go out as a slice of the
// buffer the slots wrote them into. The slice keeps its buffer (a
// shared_ptr) until gRPC has sent it, on whichever thread it lets go. The
// bytes are those protobuf would write for the whole message, so every
// protobuf parser reads them as it would read that message. Tensors of a
// few KiB are copied: a slice of their own would cost more.

// A PredictResponse: `head` with its outputs' raw empty, `raw[i]` being
// outputs(i).raw (null: empty). `raw` has one entry per output.
grpc::ByteBuffer EncodePredictResponse(const v1::PredictResponse& head,
                                       absl::Span<const std::shared_ptr<HostBuffer>> raw);

// A ModelInferResponse: `head` without raw_output_contents, entry j of which
// is `raw_output_contents[j]` (null: an empty entry, as for an output
// placed in shared memory).
grpc::ByteBuffer EncodeModelInferResponse(
    const inference::ModelInferResponse& head,
    absl::Span<const std::shared_ptr<HostBuffer>> raw_output_contents);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_WIRE_RESPONSE_H_
