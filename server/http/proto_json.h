#ifndef REPLICAD_SERVER_HTTP_PROTO_JSON_H_
#define REPLICAD_SERVER_HTTP_PROTO_JSON_H_

#include <google/protobuf/message.h>

#include "nlohmann/json.hpp"

namespace replicad {

// A protobuf message as the Open Inference Protocol's HTTP door prints it,
// Triton's way: field names as in the .proto ("max_batch_size"), 64-bit
// integers as JSON numbers (protobuf's own printer makes them strings, which
// Triton's clients and perf_analyzer do not read), enums by name, maps as
// objects, bytes in base64. Scalars and lists are always printed, defaults
// included; a message field only when set, a oneof member only when chosen.
nlohmann::json ProtoToJson(const google::protobuf::Message& message);

}  // namespace replicad

#endif  // REPLICAD_SERVER_HTTP_PROTO_JSON_H_
