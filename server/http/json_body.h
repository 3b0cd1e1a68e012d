#ifndef REPLICAD_SERVER_HTTP_JSON_BODY_H_
#define REPLICAD_SERVER_HTTP_JSON_BODY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "nlohmann/json.hpp"

namespace replicad {

// The JSON of the HTTP door's bodies (nlohmann's), and what its routes
// share to read and write them. Errors are InvalidArgument naming the field
// as the request spells it, the expected and the received value.
using json = nlohmann::json;

inline constexpr char kJson[] = "application/json";

// "object", "array", "string", "number", ... for messages.
const char* TypeName(const json& j);

// JSON text for an answer. Strings a client sent (names, ids, bytes quoted in
// a parse error) may not be UTF-8, which JSON requires: such bytes print as
// U+FFFD rather than failing the answer.
std::string Dump(const json& j);

// A JSON parameter value (boolean, number or string) as the protocol's
// InferParameter; an object of them as a parameter map.
absl::Status ToParameter(const json& value, const std::string& field,
                         inference::InferParameter* out);
absl::Status ToParameters(const json& object, const std::string& field,
                          google::protobuf::Map<std::string, inference::InferParameter>* out);

// The body of a control request: a JSON object; an empty body is `{}` when
// `allow_empty`. InvalidArgument otherwise, showing `expected`.
absl::StatusOr<json> JsonObjectBody(const std::string& body, bool allow_empty,
                                    absl::string_view expected);

// A member that must be a string; empty when it is absent and not `required`.
absl::StatusOr<std::string> StringMember(const json& object, const char* name,
                                         const std::string& field, bool required);

}  // namespace replicad

#endif  // REPLICAD_SERVER_HTTP_JSON_BODY_H_
