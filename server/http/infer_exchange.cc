#include "server/http/infer_exchange.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"
#include "core/tensor/half_float.h"

namespace replicad {
namespace {

constexpr char kHeaderLength[] = "Inference-Header-Content-Length";
// JSON tensors nest one array per dimension; deeper than any model's rank
// is a hostile body, refused before it can exhaust the stack.
constexpr int kMaxDataDepth = 32;

// A JSON tensor's "data", flat or nested one array per dimension, in
// row-major order, as `dtype` values.
template <typename T>
absl::Status Flatten(const json& data, const std::string& field, int depth, const char* datatype,
                     std::vector<T>* out) {
  if (depth > kMaxDataDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": nested deeper than ", kMaxDataDepth, " arrays"));
  }
  if (data.is_array()) {
    for (const json& element : data) {
      if (absl::Status s = Flatten(element, field, depth + 1, datatype, out); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, float>) {
    if (data.is_number()) {
      const double value = data.get<double>();
      if (std::abs(value) > std::numeric_limits<float>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(field, "[", out->size(), "]: ", data.dump(),
                                                       " is outside ", datatype, "'s range"));
      }
      out->push_back(static_cast<float>(value));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(field, "[", out->size(),
                                                   "]: expected a number for datatype ", datatype,
                                                   ", received ", TypeName(data)));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (data.is_boolean()) {
      out->push_back(data.get<bool>());
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", out->size(),
                     "]: expected true or false for datatype BOOL, received ", data.dump()));
  } else {
    const bool in_range =
        data.is_number_integer() &&
        (data.is_number_unsigned()
             ? data.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
             : data.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                   data.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max()));
    if (in_range) {
      out->push_back(static_cast<T>(data.get<int64_t>()));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", out->size(), "]: expected an integer in [",
                     static_cast<int64_t>(std::numeric_limits<T>::min()), ", ",
                     static_cast<uint64_t>(std::numeric_limits<T>::max()), "] for datatype ",
                     datatype, ", received ", data.dump()));
  }
}

// FP16 and BF16 elements arrive as JSON numbers: each must be finite in the
// type (Flatten has checked it against FP32's range), then is rounded to it.
absl::StatusOr<std::vector<char>> JsonHalfFloatBytes(const json& data, DType dtype,
                                                     const std::string& field) {
  std::vector<float> values;
  REPLICAD_RETURN_IF_ERROR(Flatten(data, field, 0, DatatypeOf(dtype), &values));
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = FloatToHalfFloatBits(dtype, values[i]);
    if (std::isinf(HalfFloatBitsToFloat(dtype, bits[i])) && !std::isinf(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "]: ", values[i], " is outside ", DatatypeOf(dtype), "'s range"));
    }
  }
  std::vector<char> bytes(bits.size() * sizeof(uint16_t));
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return bytes;
}

// `data` as the bytes of `dtype`'s elements.
absl::StatusOr<std::vector<char>> JsonTensorBytes(const json& data, DType dtype,
                                                  const std::string& field) {
  if (IsHalfFloatDType(dtype)) return JsonHalfFloatBytes(data, dtype, field);
  return VisitDType(dtype, [&](auto traits) -> absl::StatusOr<std::vector<char>> {
    using T = typename decltype(traits)::Type;
    const char* datatype = DatatypeOf(dtype);
    std::vector<char> bytes;
    if (dtype == DType::kBool) {
      std::vector<bool> values;
      REPLICAD_RETURN_IF_ERROR(Flatten(data, field, 0, datatype, &values));
      bytes.assign(values.begin(), values.end());
      return bytes;
    }
    std::vector<T> values;
    REPLICAD_RETURN_IF_ERROR(Flatten(data, field, 0, datatype, &values));
    bytes.resize(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  });
}

}  // namespace

// Parses the body into `protocol_` and the bytes of each input.
absl::Status InferExchange::Parse(const std::string& model, const std::string& version) {
  absl::string_view header = request_.body;
  absl::string_view binary;
  if (const std::string* length = request_.Header(kHeaderLength)) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(*length, &n) || n > request_.body.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kHeaderLength, ": expected the JSON header's length, at most the body's ",
                       request_.body.size(), " bytes, received '", *length, "'"));
    }
    header = header.substr(0, n);
    binary = absl::string_view(request_.body).substr(n);
  }
  json body;
  try {
    body = json::parse(header.begin(), header.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("request body: malformed JSON: ", e.what()));
  }
  if (!body.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body: expected a JSON object, received ", TypeName(body)));
  }
  protocol_.set_model_name(model);
  protocol_.set_model_version(version);
  REPLICAD_ASSIGN_OR_RETURN(std::string id, StringMember(body, "id", "request", false));
  protocol_.set_id(id);
  if (auto it = body.find("parameters"); it != body.end()) {
    if (absl::Status s = ToParameters(*it, "parameters", protocol_.mutable_parameters()); !s.ok()) {
      return s;
    }
  }
  auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: expected an array of input tensors, received ",
                     inputs == body.end() ? "none" : TypeName(*inputs)));
  }
  size_t binary_used = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    absl::Status s = ParseInput((*inputs)[i], i, binary, &binary_used);
    if (!s.ok()) return s;
  }
  if (binary_used != binary.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("binary data: the inputs' binary_data_size add up to ", binary_used,
                     " bytes, but the body holds ", binary.size(), " bytes after the JSON header"));
  }
  default_binary_ = false;
  if (auto it = protocol_.parameters().find("binary_data_output");
      it != protocol_.parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters.binary_data_output: expected a boolean, received ",
                       ParameterText(it->second)));
    }
    default_binary_ = it->second.bool_param();
  }
  if (auto outputs = body.find("outputs"); outputs != body.end()) {
    if (!outputs->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("outputs: expected an array, received ", TypeName(*outputs)));
    }
    for (size_t i = 0; i < outputs->size(); ++i) {
      if (absl::Status s = ParseOutput((*outputs)[i], i); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Where the decoder placed tensors in shared memory.
void InferExchange::Placed(std::map<std::string, TensorRegion> outputs, InputMemory inputs) {
  set_regions(std::move(outputs));
  HoldInputs(std::move(inputs));
}

// The answer: JSON, with the binary outputs after it when there are any.
HttpResponse InferExchange::Answer(const LoadedModel& model) const {
  json out = {{"model_name", model.name}, {"model_version", absl::StrCat(model.version)}};
  if (!protocol_.id().empty()) out["id"] = protocol_.id();
  json outputs = json::array();
  size_t binary_bytes = 0;
  for (const Output& o : outputs_) {
    json tensor = {
        {"name", o.name}, {"datatype", DatatypeOf(o.type.dtype)}, {"shape", o.type.shape}};
    if (o.region) {
      tensor["parameters"] = {{"shared_memory_region", o.region->region},
                              {"shared_memory_byte_size", ByteSize(o.type)}};
      if (o.region->offset > 0) tensor["parameters"]["shared_memory_offset"] = o.region->offset;
    } else if (o.binary) {
      tensor["parameters"] = {{"binary_data_size", o.bytes.size()}};
      binary_bytes += o.bytes.size();
    } else {
      tensor["data"] = DataOf(o);
    }
    outputs.push_back(std::move(tensor));
  }
  out["outputs"] = std::move(outputs);
  HttpResponse response;
  response.body = Dump(out);
  if (binary_bytes == 0) {
    response.content_type = kJson;
    return response;
  }
  response.content_type = "application/octet-stream";
  response.headers.emplace_back(kHeaderLength, absl::StrCat(response.body.size()));
  response.body.reserve(response.body.size() + binary_bytes);
  for (const Output& o : outputs_) {
    if (!o.region && o.binary) response.body.append(o.bytes.data(), o.bytes.size());
  }
  return response;
}

// What input and output tensors share: an object with a "name" and
// optional "parameters". Returns how messages name the tensor.
template <typename Tensor>
absl::StatusOr<std::string> InferExchange::ParseTensor(const json& object, const std::string& field,
                                                       Tensor* tensor) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected an object, received ", TypeName(object)));
  }
  REPLICAD_ASSIGN_OR_RETURN(std::string name, StringMember(object, "name", field, true));
  tensor->set_name(name);
  std::string named = absl::StrCat(field, " '", ClientText(name), "'");
  if (auto it = object.find("parameters"); it != object.end()) {
    if (absl::Status s = ToParameters(*it, named + ".parameters", tensor->mutable_parameters());
        !s.ok()) {
      return s;
    }
  }
  return named;
}

absl::Status InferExchange::ParseInput(const json& input, size_t i, absl::string_view binary,
                                       size_t* binary_used) {
  inference::ModelInferRequest::InferInputTensor* tensor = protocol_.add_inputs();
  REPLICAD_ASSIGN_OR_RETURN(std::string tensor_name,
                            ParseTensor(input, absl::StrCat("inputs[", i, "]"), tensor));
  const std::string& named = tensor_name;
  absl::StatusOr<std::string> datatype = StringMember(input, "datatype", named, true);
  if (!datatype.ok()) return datatype.status();
  tensor->set_datatype(*datatype);
  auto shape = input.find("shape");
  if (shape == input.end() || !shape->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, ".shape: expected an array of integers, received ",
                     shape == input.end() ? "none" : TypeName(*shape)));
  }
  for (const json& d : *shape) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > INT64_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat(named, ".shape: expected an array of integers, received ", shape->dump()));
    }
    tensor->add_shape(d.get<int64_t>());
  }
  auto data = input.find("data");
  auto binary_size = tensor->parameters().find("binary_data_size");
  if (binary_size != tensor->parameters().end()) {
    if (data != input.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          named, ": both data and parameters.binary_data_size are given; send one of them"));
    }
    absl::StatusOr<uint64_t> size =
        UnsignedParameter(binary_size->second, named + ".parameters.binary_data_size");
    if (!size.ok()) return size.status();
    if (*size > binary.size() - *binary_used) {
      return absl::InvalidArgumentError(absl::StrCat(
          named, ".parameters.binary_data_size: ", *size, " bytes from offset ", *binary_used,
          " run past the ", binary.size(), " bytes of binary data after the JSON header"));
    }
    input_bytes_.push_back(WireBytes{binary.data() + *binary_used, *size, true});
    *binary_used += *size;
    return absl::OkStatus();
  }
  if (data == input.end()) {
    input_bytes_.push_back(WireBytes{});  // Shared memory, or an error the decoder names.
    return absl::OkStatus();
  }
  const std::string data_field = named + ".data";
  absl::StatusOr<DType> dtype = DTypeFromDatatype(*datatype, named + ".datatype");
  if (!dtype.ok()) {
    input_bytes_.push_back(WireBytes{});  // The decoder names the datatype.
    return absl::OkStatus();
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<char> bytes, JsonTensorBytes(*data, *dtype, data_field));
  const std::vector<char>& values = json_data_.emplace_back(std::move(bytes));
  input_bytes_.push_back(WireBytes{values.data(), values.size(), true});
  return absl::OkStatus();
}

absl::Status InferExchange::ParseOutput(const json& output, size_t i) {
  inference::ModelInferRequest::InferRequestedOutputTensor* tensor = protocol_.add_outputs();
  REPLICAD_ASSIGN_OR_RETURN(std::string tensor_name,
                            ParseTensor(output, absl::StrCat("outputs[", i, "]"), tensor));
  const std::string& named = tensor_name;
  bool binary = default_binary_;
  if (auto it = tensor->parameters().find("binary_data"); it != tensor->parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError(absl::StrCat(named,
                                                     ".parameters.binary_data: expected a "
                                                     "boolean, received ",
                                                     ParameterText(it->second)));
    }
    binary = it->second.bool_param();
  }
  binary_outputs_[tensor->name()] = binary;
  return absl::OkStatus();
}

absl::StatusOr<void*> InferExchange::Place(const TensorSpec& spec, const TensorType& type,
                                           const TensorRegion* region) {
  Output& o = outputs_.emplace_back();
  o.name = spec.name;
  o.type = type;
  if (region != nullptr) {
    o.region = *region;
    return nullptr;
  }
  auto it = binary_outputs_.find(spec.name);
  o.binary = it != binary_outputs_.end() ? it->second : default_binary_;
  o.bytes.resize(ByteSize(type));
  return o.bytes.data();
}

json InferExchange::DataOf(const Output& o) {
  json data = json::array();
  const size_t n = o.bytes.size() / DTypeSize(o.type.dtype);
  data.get_ref<json::array_t&>().reserve(n);
  VisitDType(o.type.dtype, [&](auto traits) {
    using T = typename decltype(traits)::Type;
    for (size_t k = 0; k < n; ++k) {
      T v;
      std::memcpy(&v, o.bytes.data() + k * sizeof(T), sizeof(T));
      if (o.type.dtype == DType::kBool) {
        data.push_back(v != 0);
      } else if (IsHalfFloatDType(o.type.dtype)) {
        data.push_back(
            static_cast<double>(HalfFloatBitsToFloat(o.type.dtype, static_cast<uint16_t>(v))));
      } else if constexpr (std::is_same_v<T, float>) {
        data.push_back(static_cast<double>(v));
      } else {
        data.push_back(static_cast<int64_t>(v));
      }
    }
  });
  return data;
}

}  // namespace replicad
