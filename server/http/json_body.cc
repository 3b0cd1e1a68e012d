#include "server/http/json_body.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace replicad {

const char* TypeName(const json& j) { return j.type_name(); }

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A JSON parameter value as the protocol's InferParameter.
absl::Status ToParameter(const json& value, const std::string& field,
                         inference::InferParameter* out) {
  if (value.is_boolean()) {
    out->set_bool_param(value.get<bool>());
  } else if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      out->set_int64_param(static_cast<int64_t>(v));
    } else {
      out->set_uint64_param(v);
    }
  } else if (value.is_number_integer()) {
    out->set_int64_param(value.get<int64_t>());
  } else if (value.is_number_float()) {
    out->set_double_param(value.get<double>());
  } else if (value.is_string()) {
    out->set_string_param(value.get<std::string>());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected a boolean, number or string, received ", TypeName(value)));
  }
  return absl::OkStatus();
}

absl::Status ToParameters(const json& object, const std::string& field,
                          google::protobuf::Map<std::string, inference::InferParameter>* out) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected an object, received ", TypeName(object)));
  }
  for (const auto& [name, value] : object.items()) {
    if (absl::Status s = ToParameter(value, absl::StrCat(field, ".", name), &(*out)[name]);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The body of a control request: a JSON object; an empty body is `{}` when
// `allow_empty`. InvalidArgument otherwise, showing `expected`.
absl::StatusOr<json> JsonObjectBody(const std::string& body, bool allow_empty,
                                    absl::string_view expected) {
  if (body.empty() && allow_empty) return json::object();
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("request body: expected ", expected));
  }
  return parsed;
}

// A member that must be a string.
absl::StatusOr<std::string> StringMember(const json& object, const char* name,
                                         const std::string& field, bool required) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (!required) return std::string();
    return absl::InvalidArgumentError(absl::StrCat(field, ".", name, ": required"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".", name, ": expected a string, received ", TypeName(*it)));
  }
  return it->get<std::string>();
}

}  // namespace replicad
