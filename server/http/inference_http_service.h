#ifndef REPLICAD_SERVER_HTTP_INFERENCE_HTTP_SERVICE_H_
#define REPLICAD_SERVER_HTTP_INFERENCE_HTTP_SERVICE_H_

#include <string>
#include <vector>

#include "core/serve/serving_core.h"
#include "server/auth/access_tokens.h"
#include "server/http/http_server.h"
#include "server/http/route_table.h"
#include "server/model_upload.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"

namespace replicad {

// The Open Inference Protocol's HTTP/REST door (KServe v2 as Triton extends
// it), an HttpHandler for HttpServer:
//   GET  /v2/health/live, /v2/health/ready          200, or 400 when not
//   GET  /v2                                        server metadata
//   GET  /v2/models/M[/versions/V]                  model metadata
//   GET  /v2/models/M[/versions/V]/ready            200, or 400 when not
//   GET  /v2/models/M[/versions/V]/config           Triton's ModelConfig
//   GET  /v2/models[/M[/versions/V]]/stats          statistics
//   POST /v2/models/M[/versions/V]/infer            inference: JSON tensors,
//        Triton's binary tensor extension (Inference-Header-Content-Length,
//        binary_data_size, binary_data / binary_data_output) and system
//        shared memory (shared_memory_region/_offset/_byte_size)
//   POST /v2/repository/index, /v2/repository/models/M/load|unload
//   GET  /v2/systemsharedmemory[/region/R]/status
//   POST /v2/systemsharedmemory/region/R/register, [/region/R]/unregister
// Each route decodes into the serving core's terms and the shared
// inference_protocol/inference_request functions, calls, and prints the
// answer as JSON. Errors are {"error": "..."} with Triton's HTTP status:
// 400 for invalid arguments, 404 not found, 501 unimplemented, 503
// unavailable, 500 internal; 405 for a method a route does not take; with
// tokens, 401 (WWW-Authenticate: Bearer) or 403 as AccessTokens::Check says.
// Thread-safe; everything given must outlive the service. A null
// `shared_memory` disables that extension.
class InferenceHttpService {
 public:
  // `tokens` null: no auth (see server/auth/access_tokens.h).
  InferenceHttpService(ServingCore& core, ServerMetrics& metrics,
                       SharedMemoryRegistry* shared_memory, const AccessTokens* tokens = nullptr,
                       ModelUploads* uploads = nullptr);

  void Handle(HttpRequest request, HttpResponder respond);
  // HttpServer::Options::screen: with tokens, a request without a known
  // token is refused (401) before its body is read, unless it asks for
  // health; the route's own role is checked once it is routed.
  std::optional<HttpResponse> Screen(const HttpRequest& head) const;

  HttpHandler AsHandler() {
    return [this](HttpRequest request, HttpResponder respond) {
      Handle(std::move(request), std::move(respond));
    };
  }

  // The body of an error answer, also for HttpServer's own (400, 413, 431).
  static HttpResponse ErrorResponse(int status, const std::string& message);

 private:
  class Call;
  // One short method per route: the route's role was checked (Handle) and
  // its path parameters ("model", "version", "region") captured.
  using RouteHandler = void (InferenceHttpService::*)(Call call, const PathParams& params,
                                                      HttpRequest request);
  struct Route {
    const char* rpc;  // access_policy.h's name, and the metric's method ("http:<rpc>").
    RouteHandler handle;
  };
  void AddRoutes();
  // 405 with Allow when the path takes other methods; 501 for Triton's
  // extensions replicad lacks; 404 otherwise.
  void Unrouted(Call call, const HttpRequest& request, const std::vector<std::string>& path,
                const std::string& allowed);
  void ServerMetadata(Call call, const PathParams& params, HttpRequest request);
  void ServerLive(Call call, const PathParams& params, HttpRequest request);
  void ServerReady(Call call, const PathParams& params, HttpRequest request);
  void ModelMetadata(Call call, const PathParams& params, HttpRequest request);
  void ModelReady(Call call, const PathParams& params, HttpRequest request);
  void ModelConfig(Call call, const PathParams& params, HttpRequest request);
  void ModelStatistics(Call call, const PathParams& params, HttpRequest request);
  void Infer(Call call, const PathParams& params, HttpRequest request);
  void RepositoryIndex(Call call, const PathParams& params, HttpRequest request);
  void RepositoryModelLoad(Call call, const PathParams& params, HttpRequest request);
  void RepositoryModelUnload(Call call, const PathParams& params, HttpRequest request);
  void SharedMemoryStatus(Call call, const PathParams& params, HttpRequest request);
  void SharedMemoryRegister(Call call, const PathParams& params, HttpRequest request);
  void SharedMemoryUnregister(Call call, const PathParams& params, HttpRequest request);
  void CudaSharedMemoryStatus(Call call, const PathParams& params, HttpRequest request);
  void CudaSharedMemoryRegister(Call call, const PathParams& params, HttpRequest request);
  void CudaSharedMemoryUnregister(Call call, const PathParams& params, HttpRequest request);

  RouteTable<Route> routes_;
  ServingCore& core_;
  ServerMetrics& metrics_;
  SharedMemoryRegistry* const shared_memory_;
  const AccessTokens* const tokens_;
  ModelUploads* const uploads_;  // Null: no --model-upload-root.
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_HTTP_INFERENCE_HTTP_SERVICE_H_
