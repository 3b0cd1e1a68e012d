#include "server/http/inference_http_service.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/serve/client_text.h"
#include "nlohmann/json.hpp"
#include "server/error_message.h"
#include "server/http/proto_json.h"
#include "server/inference_protocol.h"
#include "server/inference_request.h"

namespace replicad {
namespace {

using json = nlohmann::json;

constexpr char kJson[] = "application/json";
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";
// JSON tensors nest one array per dimension; deeper than any model's rank
// is a hostile body, refused before it can exhaust the stack.
constexpr int kMaxDataDepth = 32;

// Triton's HTTP status for each error (http_server.cc's HttpCodeFromError),
// and the nearest one for codes Triton does not produce.
int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
      return 500;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    default:
      return 400;
  }
}

const char* TypeName(const json& j) { return j.type_name(); }

// JSON text for an answer. Strings a client sent (names, ids, bytes quoted in
// a parse error) may not be UTF-8, which JSON requires: such bytes print as
// U+FFFD rather than failing the answer.
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

// A JSON tensor's "data", flat or nested one array per dimension, in
// row-major order, as `dtype` values.
template <typename T>
absl::Status Flatten(const json& data, const std::string& field, int depth, std::vector<T>* out) {
  if (depth > kMaxDataDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": nested deeper than ", kMaxDataDepth, " arrays"));
  }
  if (data.is_array()) {
    for (const json& element : data) {
      if (absl::Status s = Flatten(element, field, depth + 1, out); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, float>) {
    if (data.is_number()) {
      const double value = data.get<double>();
      if (std::abs(value) > std::numeric_limits<float>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, "[", out->size(), "]: ", data.dump(), " is outside FP32's range"));
      }
      out->push_back(static_cast<float>(value));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", out->size(), "]: expected a number for datatype FP32, received ",
                     TypeName(data)));
  } else {
    if (data.is_number_integer() &&
        (!data.is_number_unsigned() ||
         data.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      out->push_back(data.get<int64_t>());
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", out->size(),
                     "]: expected an integer in int64's range for datatype INT64, "
                     "received ",
                     data.dump()));
  }
}

// One inference over HTTP, from the parsed body to the written answer. Owns
// every byte the core's request views (the body, JSON data converted) and
// the outputs until the answer is sent.
class InferExchange : public InferOutputs {
 public:
  explicit InferExchange(HttpRequest request) : request_(std::move(request)) {}

  // Parses the body into `protocol_` and the bytes of each input.
  absl::Status Parse(const std::string& model, const std::string& version) {
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
    absl::StatusOr<std::string> id = StringMember(body, "id", "request", false);
    if (!id.ok()) return id.status();
    protocol_.set_id(*id);
    if (auto it = body.find("parameters"); it != body.end()) {
      if (absl::Status s = ToParameters(*it, "parameters", protocol_.mutable_parameters());
          !s.ok()) {
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
      return absl::InvalidArgumentError(absl::StrCat(
          "binary data: the inputs' binary_data_size add up to ", binary_used,
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

  const inference::ModelInferRequest& protocol() const { return protocol_; }
  const std::vector<WireBytes>& input_bytes() const { return input_bytes_; }
  // Where the decoder placed tensors in shared memory.
  void Placed(std::map<std::string, TensorRegion> outputs, InputMemory inputs) {
    set_regions(std::move(outputs));
    HoldInputs(std::move(inputs));
  }

  // The answer: JSON, with the binary outputs after it when there are any.
  HttpResponse Answer(const LoadedModel& model) const {
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

 private:
  struct Output {
    std::string name;
    TensorType type;
    std::vector<char> bytes;  // Not a string: a short string's bytes move with it.
    std::optional<TensorRegion> region;
    bool binary = false;
  };

  // What input and output tensors share: an object with a "name" and
  // optional "parameters". Returns how messages name the tensor.
  template <typename Tensor>
  static absl::StatusOr<std::string> ParseTensor(const json& object, const std::string& field,
                                                 Tensor* tensor) {
    if (!object.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": expected an object, received ", TypeName(object)));
    }
    absl::StatusOr<std::string> name = StringMember(object, "name", field, true);
    if (!name.ok()) return name.status();
    tensor->set_name(*name);
    std::string named = absl::StrCat(field, " '", ClientText(*name), "'");
    if (auto it = object.find("parameters"); it != object.end()) {
      if (absl::Status s = ToParameters(*it, named + ".parameters", tensor->mutable_parameters());
          !s.ok()) {
        return s;
      }
    }
    return named;
  }

  absl::Status ParseInput(const json& input, size_t i, absl::string_view binary,
                          size_t* binary_used) {
    inference::ModelInferRequest::InferInputTensor* tensor = protocol_.add_inputs();
    absl::StatusOr<std::string> tensor_name =
        ParseTensor(input, absl::StrCat("inputs[", i, "]"), tensor);
    if (!tensor_name.ok()) return tensor_name.status();
    const std::string& named = *tensor_name;
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
    if (*datatype == "FP32") {
      std::vector<float>& values = float_data_.emplace_back();
      if (absl::Status s = Flatten(*data, data_field, 0, &values); !s.ok()) return s;
      input_bytes_.push_back(WireBytes{values.data(), values.size() * sizeof(float), true});
    } else if (*datatype == "INT64") {
      std::vector<int64_t>& values = int_data_.emplace_back();
      if (absl::Status s = Flatten(*data, data_field, 0, &values); !s.ok()) return s;
      input_bytes_.push_back(WireBytes{values.data(), values.size() * sizeof(int64_t), true});
    } else {
      input_bytes_.push_back(WireBytes{});  // The decoder names the datatype.
    }
    return absl::OkStatus();
  }

  absl::Status ParseOutput(const json& output, size_t i) {
    inference::ModelInferRequest::InferRequestedOutputTensor* tensor = protocol_.add_outputs();
    absl::StatusOr<std::string> tensor_name =
        ParseTensor(output, absl::StrCat("outputs[", i, "]"), tensor);
    if (!tensor_name.ok()) return tensor_name.status();
    const std::string& named = *tensor_name;
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

  absl::StatusOr<void*> Place(const TensorSpec& spec, const TensorType& type,
                              const TensorRegion* region) override {
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

  static json DataOf(const Output& o) {
    json data = json::array();
    const size_t n = o.bytes.size() / DTypeSize(o.type.dtype);
    data.get_ref<json::array_t&>().reserve(n);
    for (size_t k = 0; k < n; ++k) {
      if (o.type.dtype == DType::kFloat32) {
        float v;
        std::memcpy(&v, o.bytes.data() + k * sizeof(float), sizeof(float));
        data.push_back(static_cast<double>(v));
      } else {
        int64_t v;
        std::memcpy(&v, o.bytes.data() + k * sizeof(int64_t), sizeof(int64_t));
        data.push_back(v);
      }
    }
    return data;
  }

  HttpRequest request_;                    // The binary inputs view its body.
  inference::ModelInferRequest protocol_;  // The request without tensor bytes.
  std::vector<WireBytes> input_bytes_;
  std::vector<std::vector<float>> float_data_;  // JSON data, converted.
  std::vector<std::vector<int64_t>> int_data_;
  bool default_binary_ = false;
  std::map<std::string, bool> binary_outputs_;
  std::vector<Output> outputs_;
};

}  // namespace

// One request's way back: the metrics it records and its answer.
class InferenceHttpService::Call {
 public:
  // `tokens` null: no auth; `authorization`: the request's header, or null.
  Call(ServerMetrics& metrics, HttpResponder respond, const AccessTokens* tokens,
       const std::string* authorization)
      : metrics_(&metrics),
        respond_(std::move(respond)),
        start_(std::chrono::steady_clock::now()),
        tokens_(tokens),
        authorization_(authorization != nullptr ? std::optional<std::string>(*authorization)
                                                : std::nullopt) {}

  void set_method(std::string method) { method_ = std::move(method); }
  // Names the call `rpc` (access_policy.h's names) and, when the caller may
  // not make it, answers 401 or 403 and returns false.
  bool Admit(const std::string& rpc) {
    method_ = absl::StrCat("http:", rpc);
    if (tokens_ == nullptr) return true;
    absl::Status access = tokens_->Check(authorization_ ? &*authorization_ : nullptr, rpc);
    if (access.ok()) return true;
    HttpResponse refused =
        ErrorResponse(HttpStatusOf(access.code()), std::string(access.message()));
    if (absl::IsUnauthenticated(access)) refused.headers.emplace_back("WWW-Authenticate", "Bearer");
    Finish(access, std::move(refused));
    return false;
  }

  // `model` labels the metrics ("" for none and for unknown names, so that
  // clients cannot grow the series).
  void Finish(const absl::Status& status, HttpResponse response, const std::string& model = "") {
    metrics_->RecordRequest(
        model, method_, status,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    std::move(respond_)(std::move(response));
  }
  void Fail(const absl::Status& status, const std::string& model = "") {
    Finish(status, ErrorResponse(HttpStatusOf(status.code()), std::string(status.message())),
           model);
  }
  void Json(const absl::Status& status, const json& body, const std::string& model = "") {
    if (!status.ok()) return Fail(status);
    Finish(status, HttpResponse{200, kJson, {}, Dump(body)}, model);
  }
  // 200 with an empty body, or the error.
  void Empty(const absl::Status& status, const std::string& model = "") {
    if (!status.ok()) return Fail(status);
    Finish(status, HttpResponse{200, kJson, {}, ""}, model);
  }
  // For health and readiness: 200, or 400 with no body, as Triton answers.
  void Flag(bool value, const std::string& model = "") {
    Finish(absl::OkStatus(), HttpResponse{value ? 200 : 400, kJson, {}, ""}, model);
  }

 private:
  ServerMetrics* metrics_;
  HttpResponder respond_;
  std::string method_ = "http";
  std::chrono::steady_clock::time_point start_;
  const AccessTokens* tokens_;
  std::optional<std::string> authorization_;
};

InferenceHttpService::InferenceHttpService(ServingCore& core, ServerMetrics& metrics,
                                           SharedMemoryRegistry* shared_memory,
                                           const AccessTokens* tokens)
    : core_(core), metrics_(metrics), shared_memory_(shared_memory), tokens_(tokens) {
  AddRoutes();
}

HttpResponse InferenceHttpService::ErrorResponse(int status, const std::string& message) {
  return HttpResponse{status, kJson, {}, Dump(json{{"error", BoundedMessage(message)}})};
}

std::optional<HttpResponse> InferenceHttpService::Screen(const HttpRequest& head) const {
  if (tokens_ == nullptr) return std::nullopt;
  const bool health =
      absl::StartsWith(head.path, "/v2/health/") ||
      (absl::StartsWith(head.path, "/v2/models/") && absl::EndsWith(head.path, "/ready"));
  if (health) return std::nullopt;
  absl::Status known = tokens_->Authenticate(head.Header("authorization"));
  if (known.ok()) return std::nullopt;
  HttpResponse refused = ErrorResponse(401, std::string(known.message()));
  refused.headers.emplace_back("WWW-Authenticate", "Bearer");
  return refused;
}

void InferenceHttpService::AddRoutes() {
  // Literal routes before captures that would take the same path.
  routes_.Add("GET", "/v2", {"ServerMetadata", &InferenceHttpService::ServerMetadata});
  routes_.Add("GET", "/v2/health/live", {"ServerLive", &InferenceHttpService::ServerLive});
  routes_.Add("GET", "/v2/health/ready", {"ServerReady", &InferenceHttpService::ServerReady});
  routes_.Add("GET", "/v2/models/stats",
              {"ModelStatistics", &InferenceHttpService::ModelStatistics});
  for (const char* model : {"/v2/models/{model}", "/v2/models/{model}/versions/{version}"}) {
    routes_.Add("GET", model, {"ModelMetadata", &InferenceHttpService::ModelMetadata});
    routes_.Add("POST", absl::StrCat(model, "/infer"),
                {"ModelInfer", &InferenceHttpService::Infer});
    routes_.Add("GET", absl::StrCat(model, "/ready"),
                {"ModelReady", &InferenceHttpService::ModelReady});
    routes_.Add("GET", absl::StrCat(model, "/config"),
                {"ModelConfig", &InferenceHttpService::ModelConfig});
    routes_.Add("GET", absl::StrCat(model, "/stats"),
                {"ModelStatistics", &InferenceHttpService::ModelStatistics});
  }
  routes_.Add("POST", "/v2/repository/index",
              {"RepositoryIndex", &InferenceHttpService::RepositoryIndex});
  routes_.Add("POST", "/v2/repository/models/{model}/load",
              {"RepositoryModelLoad", &InferenceHttpService::RepositoryModelLoad});
  routes_.Add("POST", "/v2/repository/models/{model}/unload",
              {"RepositoryModelUnload", &InferenceHttpService::RepositoryModelUnload});
  for (const char* area : {"/v2/systemsharedmemory", "/v2/systemsharedmemory/region/{region}"}) {
    routes_.Add("GET", absl::StrCat(area, "/status"),
                {"SystemSharedMemoryStatus", &InferenceHttpService::SharedMemoryStatus});
    routes_.Add("POST", absl::StrCat(area, "/register"),
                {"SystemSharedMemoryRegister", &InferenceHttpService::SharedMemoryRegister});
    routes_.Add("POST", absl::StrCat(area, "/unregister"),
                {"SystemSharedMemoryUnregister", &InferenceHttpService::SharedMemoryUnregister});
  }
}

void InferenceHttpService::Handle(HttpRequest request, HttpResponder respond) {
  Call call(metrics_, std::move(respond), tokens_, request.Header("authorization"));
  const std::vector<std::string> path = PathSegments(request.path);
  RouteTable<Route>::Found found = routes_.Find(request.method, path);
  if (found.payload == nullptr) return Unrouted(std::move(call), request, path, found.allowed);
  // The one access check: every route's role, before its handler reads anything.
  if (!call.Admit(found.payload->rpc)) return;
  (this->*found.payload->handle)(std::move(call), found.params, std::move(request));
}

void InferenceHttpService::Unrouted(Call call, const HttpRequest& request,
                                    const std::vector<std::string>& path,
                                    const std::string& allowed) {
  call.set_method("http");
  if (!allowed.empty()) {
    HttpResponse refused =
        ErrorResponse(405, absl::StrCat(request.method, " ", request.path, ": expected ", allowed));
    refused.headers.emplace_back("Allow", allowed);
    return call.Finish(absl::InvalidArgumentError("method not allowed"), std::move(refused));
  }
  const std::string area = path.size() >= 2 && path[0] == "v2" ? path[1] : "";
  if (area == "cudasharedmemory" || area == "trace" || area == "logging") {
    return call.Fail(absl::UnimplementedError(
        absl::StrCat(request.path, ": the ", area, " extension is not supported by replicad")));
  }
  call.Fail(absl::NotFoundError(absl::StrCat("no route for ", request.method, " ", request.path)));
}

namespace {

// A captured path parameter; "" when the route has none of that name.
std::string Param(const PathParams& params, absl::string_view name) {
  auto it = params.find(name);
  return it != params.end() ? it->second : "";
}

}  // namespace

void InferenceHttpService::ServerMetadata(Call call, const PathParams&, HttpRequest) {
  inference::ServerMetadataResponse metadata;
  AnswerServerMetadata(shared_memory_ != nullptr, &metadata);
  call.Json(absl::OkStatus(), ProtoToJson(metadata));
}

void InferenceHttpService::ServerLive(Call call, const PathParams&, HttpRequest) {
  call.Flag(true);
}

void InferenceHttpService::ServerReady(Call call, const PathParams&, HttpRequest) {
  call.Flag(core_.ServerReady());
}

void InferenceHttpService::ModelStatistics(Call call, const PathParams& params, HttpRequest) {
  inference::ModelStatisticsResponse stats;
  absl::StatusOr<std::shared_ptr<LoadedModel>> found =
      AnswerModelStatistics(core_, Param(params, "model"), Param(params, "version"), &stats);
  call.Json(found.status(), ProtoToJson(stats), found.ok() && *found ? (*found)->name : "");
}

void InferenceHttpService::ModelMetadata(Call call, const PathParams& params, HttpRequest) {
  inference::ModelMetadataResponse metadata;
  absl::StatusOr<std::shared_ptr<LoadedModel>> found =
      AnswerModelMetadata(core_, Param(params, "model"), Param(params, "version"), &metadata);
  call.Json(found.status(), ProtoToJson(metadata), found.ok() ? (*found)->name : "");
}

void InferenceHttpService::ModelReady(Call call, const PathParams& params, HttpRequest) {
  absl::StatusOr<int64_t> number = ParseModelVersion(Param(params, "version"), "version");
  if (!number.ok()) return call.Fail(number.status());
  call.Flag(core_.ModelReady(Param(params, "model"), *number).ok());
}

void InferenceHttpService::ModelConfig(Call call, const PathParams& params, HttpRequest) {
  inference::ModelConfig config;
  absl::StatusOr<std::shared_ptr<LoadedModel>> found =
      AnswerModelConfig(core_, Param(params, "model"), Param(params, "version"), &config);
  call.Json(found.status(), ProtoToJson(config), found.ok() ? (*found)->name : "");
}

void InferenceHttpService::RepositoryIndex(Call call, const PathParams&, HttpRequest request) {
  absl::StatusOr<json> body =
      JsonObjectBody(request.body, true, "a JSON object such as {\"ready\": true}");
  if (!body.ok()) return call.Fail(body.status());
  bool ready = false;
  if (auto it = body->find("ready"); it != body->end()) {
    if (!it->is_boolean()) {
      return call.Fail(absl::InvalidArgumentError(
          absl::StrCat("ready: expected a boolean, received ", TypeName(*it))));
    }
    ready = it->get<bool>();
  }
  inference::RepositoryIndexResponse index;
  FillRepositoryIndex(core_.models().Index(), ready, &index);
  call.Json(absl::OkStatus(), ProtoToJson(index)["models"]);
}

void InferenceHttpService::RepositoryModelLoad(Call call, const PathParams& params,
                                               HttpRequest request) {
  absl::StatusOr<json> body = JsonObjectBody(request.body, true, "a JSON object");
  if (!body.ok()) return call.Fail(body.status());
  auto parameters = body->find("parameters");
  if (parameters != body->end() && parameters->is_object()) {
    std::vector<std::string> names;
    for (const auto& [name, value] : parameters->items()) names.push_back(name);
    if (absl::Status s = CheckLoadParameters(names); !s.ok()) return call.Fail(s);
  }
  core_.LoadModel(Param(params, "model"),
                  [call = std::move(call)](absl::Status status) mutable { call.Empty(status); });
}

void InferenceHttpService::RepositoryModelUnload(Call call, const PathParams& params,
                                                 HttpRequest request) {
  absl::StatusOr<json> body = JsonObjectBody(request.body, true, "a JSON object");
  if (!body.ok()) return call.Fail(body.status());
  core_.UnloadModel(Param(params, "model"),
                    [call = std::move(call)](absl::Status status) mutable { call.Empty(status); });
}

void InferenceHttpService::SharedMemoryStatus(Call call, const PathParams& params, HttpRequest) {
  absl::StatusOr<SharedMemoryRegistry*> registry = SystemSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Fail(registry.status());
  inference::SystemSharedMemoryStatusResponse status;
  absl::Status s = FillSharedMemoryStatus(**registry, Param(params, "region"), &status);
  json list = json::array();
  for (const auto& [name, r] : status.regions()) list.push_back(ProtoToJson(r));
  call.Json(s, list);
}

void InferenceHttpService::SharedMemoryUnregister(Call call, const PathParams& params,
                                                  HttpRequest) {
  absl::StatusOr<SharedMemoryRegistry*> registry = SystemSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Fail(registry.status());
  call.Empty((*registry)->Unregister(Param(params, "region")));
}

void InferenceHttpService::SharedMemoryRegister(Call call, const PathParams& params,
                                                HttpRequest request) {
  absl::StatusOr<SharedMemoryRegistry*> registry = SystemSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Fail(registry.status());
  const std::string region = Param(params, "region");
  if (region.empty()) {
    return call.Fail(
        absl::NotFoundError("register: expected /v2/systemsharedmemory/region/NAME/register"));
  }
  absl::StatusOr<json> body =
      JsonObjectBody(request.body, false, "a JSON object {\"key\", \"offset\", \"byte_size\"}");
  if (!body.ok()) return call.Fail(body.status());
  absl::StatusOr<std::string> key = StringMember(*body, "key", "request", true);
  if (!key.ok()) return call.Fail(key.status());
  uint64_t numbers[2] = {0, 0};
  const char* names[2] = {"offset", "byte_size"};
  for (int k = 0; k < 2; ++k) {
    auto it = body->find(names[k]);
    if (it == body->end() && k == 0) continue;
    if (it == body->end() || !it->is_number_unsigned()) {
      return call.Fail(absl::InvalidArgumentError(
          absl::StrCat(names[k], ": expected a non-negative integer, received ",
                       it == body->end() ? "none" : it->dump())));
    }
    numbers[k] = it->get<uint64_t>();
  }
  call.Empty((*registry)->Register(region, *key, numbers[0], numbers[1]));
}

void InferenceHttpService::Infer(Call call, const PathParams& params, HttpRequest request) {
  const std::string model = Param(params, "model");
  const std::string version = Param(params, "version");
  auto exchange = std::make_shared<InferExchange>(std::move(request));
  if (absl::Status s = exchange->Parse(model, version); !s.ok()) return call.Fail(s);
  RequestContext context;
  context.id = exchange->protocol().id();
  absl::StatusOr<DecodedInfer> decoded =
      DecodeInferRequest(exchange->protocol(), exchange->input_bytes(), shared_memory_, &context);
  if (!decoded.ok()) return call.Fail(decoded.status());
  InferRequest infer = std::move(decoded->request);
  exchange->Placed(std::move(decoded->output_regions), std::move(decoded->inputs));
  InferExchange* writer = exchange.get();
  core_.Infer(std::move(infer), std::move(context), writer,
              [call = std::move(call), exchange = std::move(exchange)](
                  absl::Status status, ServingCore::InferAnswer answer) mutable {
                const std::string model = answer.model != nullptr ? answer.model->name : "";
                if (status.ok()) status = exchange->FinishRegions();
                if (!status.ok()) return call.Fail(status, model);
                call.Finish(status, exchange->Answer(*answer.model), model);
              });
}

}  // namespace replicad
