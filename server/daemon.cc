#include "server/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/device/gpu_telemetry.h"
#include "core/metrics/registry.h"
#include "core/serve/model_manager.h"
#include "core/serve/retirer.h"
#include "core/serve/serving_core.h"
#include "core/train/checkpoint_root.h"
#include "core/train/rank_command.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "server/auth/access_tokens.h"
#include "server/daemon_config.h"
#include "server/gpu_metrics.h"
#include "server/grpc/grpc_credentials.h"
#include "server/grpc/health_publisher.h"
#include "server/grpc/inference_service.h"
#include "server/grpc/replicad_service.h"
#include "server/grpc/token_auth_processor.h"
#include "server/grpc/unix_socket_address.h"
#include "server/host_buffer_pool.h"
#include "server/http/http_server.h"
#include "server/http/inference_http_service.h"
#include "server/local_model_repository.h"
#include "server/memory_trimmer.h"
#include "server/metrics_http_server.h"
#include "server/model_upload.h"
#include "server/protobuf_log.h"
#include "server/ranks/rank_startup.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"
#include "server/startup_load.h"

namespace replicad {

// In the order they start; they stop in the reverse order (the members'
// destruction), each before what it uses.
struct Daemon::Parts {
  explicit Parts(ServerOptions flags) : options(std::move(flags)), server_metrics(registry) {}

  ServerOptions options;
  sigset_t stop_signals;
  std::vector<DeviceInfo> devices;
  DaemonConfig config;
  std::shared_ptr<RankJob> job;
  // What this process calls itself on its listening lines: a rank other
  // than 0 says which (scripts and tests find rank 0's lines as ever).
  std::string who;
  metrics::Registry registry;
  ServerMetrics server_metrics;
  CheckpointRoot checkpoints;
  Retirer retirer;  // Before the manager: the versions it retires are freed there.
  std::unique_ptr<ModelUploads> uploads;  // --model-upload-root; null: none.
  std::unique_ptr<ModelManager> models;
  // A daemon of its own opens its doors first (liveness at once, readiness
  // once loaded); a training job's ranks load their models before they meet.
  bool listen_first = true;
  bool rank_only = false;  // A rank other than 0 that answers no client.
  std::optional<RankWorkerThread> rank_worker;
  std::unique_ptr<GpuMetrics> gpu_metrics;
  std::unique_ptr<ServingCore> core;
  TlsFiles tls;
  std::unique_ptr<AccessTokens> tokens;
  std::unique_ptr<MemoryTrimmer> trimmer;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  std::unique_ptr<SharedMemoryRegistry> shared_memory;
  std::unique_ptr<InferenceHttpService> http_door;
  std::unique_ptr<HttpServer> http_server;
  std::shared_ptr<HostBufferPool> tensor_buffers;
  std::unique_ptr<ReplicadService> service;
  std::unique_ptr<InferenceService> inference;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<HealthPublisher> health;
  std::unique_ptr<StartupLoad> startup;
  int signal_number = 0;
};

Daemon::Daemon(ServerOptions options) : parts_(std::make_unique<Parts>(std::move(options))) {
  sigset_t& stop_signals = parts_->stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
}

Daemon::~Daemon() = default;

absl::Status Daemon::Start() {
  Parts& p = *parts_;
  REPLICAD_ASSIGN_OR_RETURN(const LogFormat log_format, ParseLogFormat(p.options.log_format));
  ConfigureLog(log_format, p.options.log_verbose);
  RateLimitProtobufLogs();
  RateLimitGrpcLogs();
  if (absl::Status cache = SetCpuKernelCacheCapacity(p.options.cpu_kernel_cache); !cache.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cpu-kernel-cache: ", cache.message()));
  }
  REPLICAD_ASSIGN_OR_RETURN(p.devices, EnumerateDevices());
  REPLICAD_ASSIGN_OR_RETURN(p.config, MakeDaemonConfig(p.options, p.devices));
  REPLICAD_ASSIGN_OR_RETURN(p.job, JoinRankJob(p.options, p.config.serving));
  if (p.job != nullptr && !p.job->leads()) {
    const TrainingRanks& ranks = *p.job->training_ranks();
    p.who = absl::StrCat("rank ", ranks.rank(), " of ", ranks.size(), ": ");
    OffsetListenPorts(&p.options, ranks.rank());
  }
  REPLICAD_RETURN_IF_ERROR(StartModels());
  if (p.rank_only) return absl::OkStatus();
  REPLICAD_RETURN_IF_ERROR(StartCore());
  REPLICAD_RETURN_IF_ERROR(StartMetricsDoor());
  REPLICAD_RETURN_IF_ERROR(StartHttpDoor());
  REPLICAD_RETURN_IF_ERROR(StartGrpcDoor());
  p.health = std::make_unique<HealthPublisher>(
      p.server->GetHealthCheckService(), [core = p.core.get()] { return core->ServerReady(); });
  p.startup = std::make_unique<StartupLoad>(p.options, *p.models, *p.core, *p.health,
                                            p.listen_first, p.who);
  return absl::OkStatus();
}

absl::Status Daemon::StartModels() {
  Parts& p = *parts_;
  for (const SlotAssignment& slot : p.config.serving.slots) {
    p.server_metrics.AddDeviceSlot(DeviceIdToString(slot.device));
  }
  if (!p.options.checkpoint_root.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(p.checkpoints, CheckpointRoot::Open(p.options.checkpoint_root));
  }
  const int load_threads =
      p.options.model_load_threads > 0
          ? p.options.model_load_threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!p.options.model_upload_root.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(
        p.uploads, ModelUploads::Open(p.options.model_upload_root,
                                      static_cast<uint64_t>(p.options.max_upload_bytes)));
  }
  p.models = std::make_unique<ModelManager>(
      std::make_unique<LocalModelRepository>(LocalModelRepository::Config{
          p.options.model_repository, p.options.model_upload_root, p.config.models, p.devices,
          p.config.serving, &p.server_metrics, &p.retirer, p.checkpoints,
          p.options.keep_checkpoints, p.job, p.options.rank_shards}),
      p.retirer, load_threads);
  p.listen_first = p.job == nullptr;
  if (!p.listen_first) {
    REPLICAD_RETURN_IF_ERROR(LoadStartupModels(p.options, *p.models));
    PrintReadyModels(*p.models);
    REPLICAD_RETURN_IF_ERROR(p.job->AwaitEveryRank());
  }
  if (p.job != nullptr && !p.job->leads()) p.rank_worker.emplace(*p.job, *p.models);
  // Only rank 0 answers clients (one job, one front door), unless every
  // rank takes its own shards.
  p.rank_only = p.job != nullptr && !p.job->leads() && !p.options.rank_shards;
  return absl::OkStatus();
}

absl::Status Daemon::StartCore() {
  Parts& p = *parts_;
  // GPU telemetry through NVML where the driver provides it; the daemon runs without.
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry = GpuTelemetry::Load();
  if (telemetry.ok()) {
    p.gpu_metrics =
        std::make_unique<GpuMetrics>(p.registry, *std::move(telemetry), absl::Seconds(5));
    LogInfo("GPU metrics from NVML, refreshed every 5 s");
  } else {
    LogInfo(absl::StrCat("no GPU metrics: ", telemetry.status().message()));
  }
  ServingCore::Options core_options;
  core_options.observer = &p.server_metrics;
  core_options.explicit_model_control = p.options.model_control_mode == "explicit";
  core_options.loading_startup_models = p.listen_first;
  p.core = std::make_unique<ServingCore>(*p.models, core_options);
  p.tls = TlsFiles{p.options.tls_cert, p.options.tls_key, p.options.tls_client_ca};
  REPLICAD_RETURN_IF_ERROR(CheckTlsFiles(p.tls));
  if (!p.options.auth_tokens.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(p.tokens, AccessTokens::Open(p.options.auth_tokens));
  } else if (p.options.metrics_auth) {
    return absl::InvalidArgumentError("--metrics-auth needs --auth-tokens");
  }
  WarnIfExposed(p.options, p.tls, p.tokens != nullptr);
  // Freed plans and batches go back to the system (see memory_trimmer.h).
  p.trimmer = std::make_unique<MemoryTrimmer>(absl::Seconds(2), size_t{64} << 20);
  if (p.options.system_shared_memory) {
    // CUDA regions too where this build opens GPU memory (one namespace, as Triton's).
    p.shared_memory = std::make_unique<SharedMemoryRegistry>(
        SharedMemoryRegistry::kDefaultMaxRegions,
        CanOpenSharedDeviceMemory() ? SharedDeviceMemoryOpener(OpenSharedDeviceMemory) : nullptr);
  }
  // One pool for both doors' tensor bytes, so that the cap is the daemon's.
  p.tensor_buffers =
      std::make_shared<HostBufferPool>(static_cast<size_t>(p.options.grpc_buffer_pool_bytes));
  return absl::OkStatus();
}

absl::Status Daemon::StartMetricsDoor() {
  Parts& p = *parts_;
  if (p.options.metrics_listen.empty()) return absl::OkStatus();
  MetricsHttpServer::Options metrics_options;
  metrics_options.ready = [core = p.core.get()] { return core->ServerReady(); };
  // No client certificates here: probes and Prometheus reach it with a
  // server certificate alone (and a token under --metrics-auth).
  metrics_options.tls = TlsFiles{p.tls.cert, p.tls.key, ""};
  if (p.options.metrics_auth) {
    metrics_options.authorize = [tokens = p.tokens.get()](const HttpRequest& request) {
      return tokens->Check(request.Header("authorization"), "Metrics");
    };
  }
  REPLICAD_ASSIGN_OR_RETURN(
      p.metrics_server,
      MetricsHttpServer::Start(p.options.metrics_listen, p.registry, std::move(metrics_options)));
  LogInfo(absl::StrCat(p.who, "metrics on port ", p.metrics_server->port(), " (/metrics)"));
  return absl::OkStatus();
}

absl::Status Daemon::StartHttpDoor() {
  Parts& p = *parts_;
  p.http_door = std::make_unique<InferenceHttpService>(
      *p.core, p.server_metrics, p.shared_memory.get(), p.tokens.get(), p.uploads.get());
  if (p.options.http_listen.empty()) return absl::OkStatus();
  HttpServer::Options http_options;
  http_options.name = "HTTP endpoint (--http-listen)";
  http_options.body_limit = static_cast<size_t>(p.options.http_max_body_bytes);
  http_options.header_limit = 64 * 1024;
  http_options.threads = p.options.http_threads;
  http_options.max_connections = p.options.http_max_connections;
  http_options.render_error = &InferenceHttpService::ErrorResponse;
  http_options.tls = p.tls;
  http_options.screen = [door = p.http_door.get()](const HttpRequest& head) {
    return door->Screen(head);
  };
  REPLICAD_ASSIGN_OR_RETURN(
      p.http_server,
      HttpServer::Start(p.options.http_listen, std::move(http_options), p.http_door->AsHandler()));
  LogInfo(absl::StrCat(p.who, "HTTP listening on port ", p.http_server->port(),
                       " (Open Inference Protocol /v2)"));
  return absl::OkStatus();
}

absl::Status Daemon::StartGrpcDoor() {
  Parts& p = *parts_;
  p.service = std::make_unique<ReplicadService>(*p.core, p.devices, p.server_metrics,
                                                p.tokens.get(), p.tensor_buffers, p.uploads.get());
  p.inference =
      std::make_unique<InferenceService>(*p.core, p.server_metrics, p.shared_memory.get(),
                                         p.tokens.get(), p.tensor_buffers, p.uploads.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const std::string& listen = p.options.listen;
  REPLICAD_RETURN_IF_ERROR(CheckUnixSocketUnused(listen));
  grpc::ServerBuilder builder;
  int port = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials = GrpcCredentials(p.tls);
  // Tokens checked from the metadata, before a message is read (TLS only:
  // gRPC runs no processor on plain-text listeners).
  if (p.tokens != nullptr && p.tls.enabled()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<TokenAuthProcessor>(*p.tokens));
  }
  builder.AddListeningPort(listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(p.options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(p.options.max_message_bytes));
  builder.RegisterService(p.service.get());
  builder.RegisterService(p.inference.get());
  p.server = builder.BuildAndStart();
  // gRPC reports no port for a Unix socket (1 today).
  if (p.server == nullptr || (port == 0 && !IsUnixSocketAddress(listen))) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", listen, "' (--listen)"));
  }
  LogInfo(absl::StrCat(p.who, "gRPC listening on ",
                       IsUnixSocketAddress(listen) ? listen : absl::StrCat("port ", port),
                       " (replicad.v1, inference.GRPCInferenceService, grpc.health.v1, "
                       "reflection)"));
  return absl::OkStatus();
}

void Daemon::Wait() { sigwait(&parts_->stop_signals, &parts_->signal_number); }

int Daemon::Drain() {
  Parts& p = *parts_;
  if (p.rank_only) {
    const int status = p.rank_worker->Stop();
    if (status == 0) LogInfo(absl::StrCat("rank ", p.job->training_ranks()->rank(), " stopped"));
    return status;
  }
  if (p.startup->failed()) {
    LogError("stopping: a startup model did not load (--exit-on-error)");
  } else {
    LogInfo(absl::StrCat(p.signal_number == SIGINT ? "SIGINT" : "SIGTERM",
                         ": finishing requests in flight"));
  }
  // New Predicts are refused (UNAVAILABLE) while those in flight finish, up
  // to the grace period; then the server shuts down at once, cancelling
  // whatever is left. (gRPC's own Shutdown deadline would also wait for idle
  // client connections.)
  p.startup->Stop();
  p.core->StartDraining();
  p.health->Publish();
  const bool idle = p.core->AwaitIdle(absl::Seconds(p.options.shutdown_grace_seconds));
  if (!idle) {
    LogInfo("grace period over; cancelling requests still in flight");
    // Queued requests are answered UNAVAILABLE without running, running
    // batches stop at their next kernel: otherwise they would run to their
    // end (seconds to minutes on a CPU) while Shutdown and the destructors
    // wait for them, past any orchestrator's patience.
    p.core->StopInFlight();
  }
  // Idle means every answer was handed to gRPC, not that it was sent: a
  // large one may still be on the wire, so the calls get a moment to finish
  // (gRPC cancels what is left then), unless the grace period is over.
  constexpr auto kAnswersInTransit = std::chrono::seconds(2);
  p.server->Shutdown(std::chrono::system_clock::now() +
                     (idle ? kAnswersInTransit : std::chrono::seconds(0)));
  p.server->Wait();
  // Its answers still out are dropped; it waits for them.
  if (p.http_server) p.http_server->Stop();
  if (p.metrics_server) p.metrics_server->Stop();
  if (p.rank_worker) return p.rank_worker->Stop();
  if (p.job != nullptr) {
    absl::MutexLock order(&p.job->command_order());
    if (p.job->SendCommand(EncodeRankCommand(RankCommand{})).ok()) {
      LogInfo("stopped, and so did the other ranks");
      return 0;
    }
    return kRankGroupBroken;
  }
  LogInfo("stopped");
  return p.startup->failed() ? 1 : 0;
}

}  // namespace replicad
