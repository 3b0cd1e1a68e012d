#include "server/http/inference_http_service.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/client_text.h"
#include "core/base/clock.h"
#include "server/error_message.h"
#include "server/http/infer_exchange.h"
#include "server/http/json_body.h"
#include "server/http/proto_json.h"
#include "server/inference_protocol.h"
#include "server/inference_request.h"

namespace replicad {
namespace {

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
    metrics_->RecordRequest(model, method_, status, SecondsSince(start_));
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
                                           const AccessTokens* tokens, ModelUploads* uploads)
    : core_(core),
      metrics_(metrics),
      shared_memory_(shared_memory),
      tokens_(tokens),
      uploads_(uploads) {
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
  for (const char* area : {"/v2/cudasharedmemory", "/v2/cudasharedmemory/region/{region}"}) {
    routes_.Add("GET", absl::StrCat(area, "/status"),
                {"CudaSharedMemoryStatus", &InferenceHttpService::CudaSharedMemoryStatus});
    routes_.Add("POST", absl::StrCat(area, "/register"),
                {"CudaSharedMemoryRegister", &InferenceHttpService::CudaSharedMemoryRegister});
    routes_.Add("POST", absl::StrCat(area, "/unregister"),
                {"CudaSharedMemoryUnregister", &InferenceHttpService::CudaSharedMemoryUnregister});
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
  if (area == "trace" || area == "logging") {
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
  AnswerServerMetadata(shared_memory_, &metadata);
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
  // Triton's HTTP form of the gRPC parameters: "config" a JSON string,
  // "file:PATH" the file's bytes in base64.
  google::protobuf::Map<std::string, inference::ModelRepositoryParameter> parameters;
  auto given = body->find("parameters");
  if (given != body->end() && given->is_object()) {
    for (const auto& [name, value] : given->items()) {
      const bool file = absl::StartsWith(name, "file:");
      if (name != "config" && !file) continue;
      if (!value.is_string()) {
        return call.Fail(absl::InvalidArgumentError(absl::StrCat(
            "parameters.", name, ": expected a string", file ? " (the file in base64)" : "")));
      }
      const std::string& text = value.get_ref<const std::string&>();
      if (!file) {
        parameters[name].set_string_param(text);
      } else if (!absl::Base64Unescape(text, parameters[name].mutable_bytes_param())) {
        return call.Fail(absl::InvalidArgumentError(
            absl::StrCat("parameters.", name, ": expected the file's contents in base64")));
      }
    }
  }
  absl::StatusOr<ModelUpload> upload = UploadOfParameters(Param(params, "model"), parameters);
  if (!upload.ok()) return call.Fail(upload.status());
  LoadModelOrUpload(core_, uploads_, *std::move(upload),
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

void InferenceHttpService::CudaSharedMemoryStatus(Call call, const PathParams& params,
                                                  HttpRequest) {
  absl::StatusOr<SharedMemoryRegistry*> registry = CudaSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Fail(registry.status());
  inference::CudaSharedMemoryStatusResponse status;
  absl::Status s = FillCudaSharedMemoryStatus(**registry, Param(params, "region"), &status);
  // Numbers, not protobuf JSON's strings for uint64, as Triton's HTTP answers.
  json list = json::array();
  for (const auto& [name, r] : status.regions()) {
    list.push_back(
        {{"name", r.name()}, {"device_id", r.device_id()}, {"byte_size", r.byte_size()}});
  }
  call.Json(s, list);
}

void InferenceHttpService::CudaSharedMemoryUnregister(Call call, const PathParams& params,
                                                      HttpRequest) {
  absl::StatusOr<SharedMemoryRegistry*> registry = CudaSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Fail(registry.status());
  call.Empty((*registry)->Unregister(Param(params, "region"), SharedMemoryKind::kCuda));
}

void InferenceHttpService::CudaSharedMemoryRegister(Call call, const PathParams& params,
                                                    HttpRequest request) {
  absl::StatusOr<SharedMemoryRegistry*> registry = CudaSharedMemory(shared_memory_);
  if (!registry.ok()) return call.Fail(registry.status());
  const std::string region = Param(params, "region");
  if (region.empty()) {
    return call.Fail(absl::InvalidArgumentError(
        "'region name' is necessary to register cuda shared memory region: expected "
        "/v2/cudasharedmemory/region/NAME/register"));
  }
  absl::StatusOr<json> body =
      JsonObjectBody(request.body, false,
                     "a JSON object {\"raw_handle\": {\"b64\"}, \"device_id\", \"byte_size\"}");
  if (!body.ok()) return call.Fail(body.status());
  auto handle = body->find("raw_handle");
  const json* b64 = nullptr;
  if (handle != body->end() && handle->is_object()) {
    auto it = handle->find("b64");
    if (it != handle->end() && it->is_string()) b64 = &*it;
  }
  std::string raw_handle;
  if (b64 == nullptr || !absl::Base64Unescape(b64->get_ref<const std::string&>(), &raw_handle)) {
    return call.Fail(absl::InvalidArgumentError(
        absl::StrCat("raw_handle: expected {\"b64\": the cudaIpcMemHandle_t in base64}, received ",
                     handle == body->end() ? "none" : handle->dump().substr(0, 120))));
  }
  uint64_t numbers[2] = {0, 0};
  const char* names[2] = {"device_id", "byte_size"};
  for (int k = 0; k < 2; ++k) {
    auto it = body->find(names[k]);
    if (it == body->end() || !it->is_number_unsigned()) {
      return call.Fail(absl::InvalidArgumentError(
          absl::StrCat(names[k], ": expected a non-negative integer, received ",
                       it == body->end() ? "none" : it->dump().substr(0, 120))));
    }
    numbers[k] = it->get<uint64_t>();
  }
  if (numbers[0] > static_cast<uint64_t>(INT32_MAX)) {
    return call.Fail(absl::InvalidArgumentError(absl::StrCat(
        "device_id: expected a GPU ordinal of at most ", INT32_MAX, ", received ", numbers[0])));
  }
  call.Empty(
      (*registry)->RegisterCuda(region, raw_handle, static_cast<int64_t>(numbers[0]), numbers[1]));
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
