#include "server/http/proto_json.h"

#include <string>

#include "absl/strings/escaping.h"

namespace replicad {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

nlohmann::json FieldValue(const Message& message, const FieldDescriptor* field, int index) {
  const Reflection& r = *message.GetReflection();
  const bool repeated = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return repeated ? r.GetRepeatedInt32(message, field, index) : r.GetInt32(message, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return repeated ? r.GetRepeatedInt64(message, field, index) : r.GetInt64(message, field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? r.GetRepeatedUInt32(message, field, index) : r.GetUInt32(message, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? r.GetRepeatedUInt64(message, field, index) : r.GetUInt64(message, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? r.GetRepeatedDouble(message, field, index) : r.GetDouble(message, field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? r.GetRepeatedFloat(message, field, index) : r.GetFloat(message, field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? r.GetRepeatedBool(message, field, index) : r.GetBool(message, field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (repeated ? r.GetRepeatedEnum(message, field, index) : r.GetEnum(message, field))
          ->name();
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s =
          repeated ? r.GetRepeatedString(message, field, index) : r.GetString(message, field);
      if (field->type() == FieldDescriptor::TYPE_BYTES) return absl::Base64Escape(s);
      return s;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(repeated ? r.GetRepeatedMessage(message, field, index)
                                  : r.GetMessage(message, field));
  }
  return nullptr;
}

}  // namespace

nlohmann::json ProtoToJson(const Message& message) {
  const Reflection& r = *message.GetReflection();
  const google::protobuf::Descriptor& d = *message.GetDescriptor();
  nlohmann::json out = nlohmann::json::object();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor* field = d.field(i);
    if (field->is_map()) {
      nlohmann::json map = nlohmann::json::object();
      const FieldDescriptor* key = field->message_type()->map_key();
      const FieldDescriptor* value = field->message_type()->map_value();
      for (int k = 0; k < r.FieldSize(message, field); ++k) {
        const Message& entry = r.GetRepeatedMessage(message, field, k);
        const nlohmann::json key_json = FieldValue(entry, key, 0);
        map[key_json.is_string() ? key_json.get<std::string>() : key_json.dump()] =
            FieldValue(entry, value, 0);
      }
      out[field->name()] = std::move(map);
    } else if (field->is_repeated()) {
      nlohmann::json list = nlohmann::json::array();
      for (int k = 0; k < r.FieldSize(message, field); ++k)
        list.push_back(FieldValue(message, field, k));
      out[field->name()] = std::move(list);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ||
               field->real_containing_oneof() != nullptr || field->has_presence()) {
      if (r.HasField(message, field)) out[field->name()] = FieldValue(message, field, 0);
    } else {
      out[field->name()] = FieldValue(message, field, 0);
    }
  }
  return out;
}

}  // namespace replicad
