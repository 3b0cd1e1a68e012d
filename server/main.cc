// replicad: serves ONNX models over gRPC, splitting every batch across replicas.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/backends.h"
#include "core/device/device_map.h"
#include "core/device/gpu_telemetry.h"
#include "core/metrics/registry.h"
#include "core/model/default_model.h"
#include "core/model/weight_file.h"
#include "core/serve/model_manager.h"
#include "core/serve/retirer.h"
#include "core/serve/scheduler_options.h"
#include "core/serve/serving_core.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/auth/access_tokens.h"
#include "server/checkpoint_root.h"
#include "server/gpu_metrics.h"
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
#include "server/model_sources.h"
#include "server/protobuf_log.h"
#include "server/ranks/rank_command.h"
#include "server/ranks/rank_worker.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/shared_memory_registry.h"
#include "server/startup_load.h"
#include "server/tls_files.h"
#if REPLICAD_WITH_MPI
#include "server/ranks/mpi_training_ranks.h"
#endif

namespace replicad {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "replicad: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << std::endl;
  return 1;
}

void PrintDevices(const std::vector<DeviceInfo>& devices) {
  for (const DeviceInfo& d : devices) {
    std::printf("%-8s %-48s %8.1f GiB %s\n", DeviceIdToString(d.id).c_str(), d.name.c_str(),
                static_cast<double>(d.memory_bytes) / (1 << 30),
                d.compute_capability.empty()
                    ? ""
                    : absl::StrCat("cc ", d.compute_capability, ", driver ", d.driver_version,
                                   ", runtime ", d.runtime_version)
                          .c_str());
  }
}

// How models without a config.pbtxt are scheduled, from the flags;
// max_batch_size is --max-batch-size (each model's own limit replaces it).
absl::StatusOr<SchedulerOptions> DaemonScheduling(const ServerOptions& options) {
  SchedulerOptions scheduling;
  scheduling.dynamic_batching = options.dynamic_batching;
  scheduling.max_batch_size = options.max_batch_size;
  if (options.max_queue_delay_us < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-queue-delay-us must be >= 0; received ", options.max_queue_delay_us));
  }
  scheduling.max_queue_delay = absl::Microseconds(options.max_queue_delay_us);
  if (!options.preferred_batch_sizes.empty()) {
    std::vector<absl::string_view> items = absl::StrSplit(options.preferred_batch_sizes, ',');
    for (size_t i = 0; i < items.size(); ++i) {
      int64_t size = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(items[i]), &size) || size <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("--preferred-batch-sizes entry ", i, " is '",
                                                       items[i],
                                                       "'; expected a positive integer, e.g. 4,8"));
      }
      if (options.max_batch_size > 0 && size > options.max_batch_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("--preferred-batch-sizes entry ", i, " is ", size, "; expected at most ",
                         options.max_batch_size, " (--max-batch-size)"));
      }
      scheduling.preferred_batch_sizes.push_back(size);
    }
    std::vector<int64_t>& sizes = scheduling.preferred_batch_sizes;
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  }
  if (options.max_queue_size < 0 || options.max_queue_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("--max-queue-size must be 0 (no bound) to ",
                                                   std::numeric_limits<uint32_t>::max(),
                                                   "; received ", options.max_queue_size));
  }
  scheduling.default_queue_policy.max_queue_size = static_cast<uint32_t>(options.max_queue_size);
  if (options.max_queue_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-queue-bytes must be >= 0 (0: no bound); received ", options.max_queue_bytes));
  }
  scheduling.max_queue_bytes = static_cast<uint64_t>(options.max_queue_bytes);
  scheduling.measured_weights = options.slot_weights == "auto";
  if (options.warmup_max_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup-max-rows must be >= 1; received ", options.warmup_max_rows));
  }
  scheduling.warmup_max_rows = options.warmup_max_rows;
  if (absl::Status s = scheduling.Validate(); !s.ok()) return s;
  return scheduling;
}

// The doors' limits, checked before any model loads so that a typo fails at once.
absl::Status CheckDoorLimits(const ServerOptions& options) {
  if (options.grpc_buffer_pool_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc-buffer-pool-bytes must be >= 0 (0: none kept); received ",
                     options.grpc_buffer_pool_bytes));
  }
  for (const auto& [flag, address] :
       {std::pair<const char*, const std::string&>{"--http-listen", options.http_listen},
        {"--metrics-listen", options.metrics_listen}}) {
    if (IsUnixSocketAddress(address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag,
          ": expected HOST:PORT (Unix sockets serve gRPC only, --listen unix:PATH); received ",
          address));
    }
  }
  if (options.http_listen.empty()) return absl::OkStatus();
  const std::pair<const char*, int64_t> at_least_one[] = {
      {"--http-max-body-bytes", options.http_max_body_bytes},
      {"--http-threads", options.http_threads},
      {"--http-max-connections", options.http_max_connections},
  };
  for (const auto& [flag, value] : at_least_one) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " must be >= 1; received ", value));
    }
  }
  return absl::OkStatus();
}

// --weight-file-dir: "auto" is $TMPDIR, else /tmp, unless its files live in
// memory (then weights stay in anonymous memory, as with "none").
absl::StatusOr<std::string> WeightFileDir(const std::string& flag) {
  if (flag == "none") return std::string();
  std::string dir = flag;
  if (flag == "auto") {
    const char* tmpdir = std::getenv("TMPDIR");
    dir = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  }
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    if (flag == "auto") return std::string();
    return absl::InvalidArgumentError(
        absl::StrCat("--weight-file-dir: expected a directory, 'auto' or 'none'; received ", flag));
  }
  return flag == "auto" && IsMemoryBackedDirectory(dir) ? std::string() : dir;
}

absl::StatusOr<ServingOptions> MakeServingOptions(const ServerOptions& options,
                                                  const std::vector<DeviceInfo>& devices) {
  ServingOptions serving;
  if (options.threads_per_slot < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads-per-slot must be at least 1; received ", options.threads_per_slot));
  }
  serving.slot_options.threads_per_slot = options.threads_per_slot;
  serving.slot_options.winograd = options.winograd;
  serving.slot_options.tf32 = options.tf32;
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      options.device_map.empty() ? ParseDeviceList(options.devices, devices,
                                                   DefaultSlots(devices, options.threads_per_slot))
                                 : ParseDeviceMap(options.device_map, devices);
  if (!slots.ok()) return slots.status();
  if (options.slot_weights != "auto") {
    if (absl::Status s = ApplySlotWeights(options.slot_weights, &*slots); !s.ok()) return s;
  }
  serving.slots = *std::move(slots);
  absl::StatusOr<DeviceId> merge = ParseAvailableDevice(options.merge_device, devices);
  if (!merge.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--merge-device: ", merge.status().message()));
  }
  serving.merge_device = *merge;
  if (options.transfer_chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transfer-chunks must be >= 1; received ", options.transfer_chunks));
  }
  serving.transfer_chunks = options.transfer_chunks;
  serving.shrink_on_oom = options.shrink_on_oom;
  if (options.max_plans_per_slot < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-plans-per-slot must be >= 1; received ", options.max_plans_per_slot));
  }
  serving.max_plans_per_slot = static_cast<size_t>(options.max_plans_per_slot);
  if (options.plan_memory_per_slot < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan-memory-per-slot must be >= 0 bytes; received ", options.plan_memory_per_slot));
  }
  serving.plan_memory_per_slot = static_cast<size_t>(options.plan_memory_per_slot);
  absl::StatusOr<std::string> weight_dir = WeightFileDir(options.weight_file_dir);
  if (!weight_dir.ok()) return weight_dir.status();
  serving.weight_file_dir = *std::move(weight_dir);
  if (options.max_batch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-batch-size must be >= 0; received ", options.max_batch_size));
  }
  serving.max_batch_size = options.max_batch_size;
  absl::StatusOr<SchedulerOptions> scheduling = DaemonScheduling(options);
  if (!scheduling.ok()) return scheduling.status();
  serving.scheduling = *std::move(scheduling);
  return serving;
}

absl::StatusOr<std::vector<ModelSource>> ModelFlags(const ServerOptions& options) {
  std::vector<ModelSource> sources;
  for (const std::string& flag : options.models) {
    absl::StatusOr<ModelSource> source = ParseModelFlag(flag);
    if (!source.ok()) return source.status();
    sources.push_back(*std::move(source));
  }
  return sources;
}

absl::Status CheckModelControl(const ServerOptions& options) {
  const std::string& mode = options.model_control_mode;
  if (mode != "none" && mode != "explicit" && mode != "poll") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model-control-mode: expected none, explicit or poll; received '", mode, "'"));
  }
  if (mode != "explicit" && !options.load_models.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--load-model is for --model-control-mode explicit; received it with '", mode, "'"));
  }
  if (mode == "poll" && options.model_repository.empty()) {
    return absl::InvalidArgumentError("--model-control-mode poll needs --model-repository to poll");
  }
  if (options.model_load_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-load-threads must be >= 0 (0: one per core); received ",
                     options.model_load_threads));
  }
  if (!(options.repository_poll_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--repository-poll-seconds must be > 0; received ", options.repository_poll_seconds));
  }
  return absl::OkStatus();
}

// gRPC's credentials for --tls-*: TLS whose files gRPC's own watcher reads
// again when they change (every second), or plain text.
std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  constexpr unsigned kRefreshSeconds = 1;
  auto provider = tls.client_ca.empty()
                      ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            tls.key, tls.cert, kRefreshSeconds)
                      : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            tls.key, tls.cert, tls.client_ca, kRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (tls.client_ca.empty()) {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls_options);
}

bool IsLoopback(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host == "[::1]" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Anyone who reaches a plain-text listener beyond this machine can train the
// models, overwrite checkpoints (under --checkpoint-root) and, in explicit
// mode, load and unload models: say so where an operator looks.
void WarnIfExposed(const ServerOptions& options, const TlsFiles& tls, bool auth) {
  // TLS without tokens or client certificates encrypts, but admits anyone.
  const bool admits_anyone = !auth && tls.client_ca.empty();
  if (tls.enabled() && !admits_anyone) return;
  std::string exposed;
  for (const std::string* address :
       {&options.listen, &options.http_listen, &options.metrics_listen}) {
    // A Unix socket (gRPC only) is reachable from this host alone.
    const bool local =
        IsLoopback(*address) || (address == &options.listen && IsUnixSocketAddress(*address));
    if (!address->empty() && !local) {
      absl::StrAppend(&exposed, exposed.empty() ? "" : ", ", *address);
    }
  }
  if (exposed.empty()) return;
  std::cerr
      << "replicad: WARNING: listening beyond loopback (" << exposed << ") "
      << (tls.enabled() ? "with TLS but" : "without TLS")
      << (tls.enabled() ? "" : ": requests, tokens and tensors cross the network in clear text")
      << (admits_anyone ? (tls.enabled() ? " without --auth-tokens or --tls-client-ca: " : "; ")
                        : "; ")
      << (admits_anyone ? "anyone who connects may call TrainStep, ConfigureTraining and "
                          "SaveCheckpoint"
                        : "")
      << (admits_anyone && options.model_control_mode == "explicit" ? " and load or unload models"
                                                                    : "")
      << (admits_anyone ? "; " : "")
      << "serve with --tls-cert/--tls-key and --auth-tokens, or listen on 127.0.0.1" << std::endl;
}

// The exit status of a rank whose training group broke (a rank died or
// stopped answering): EX_TEMPFAIL, "try again", for the launcher to restart
// the job from its last checkpoint.
constexpr int kRankGroupBroken = 75;

// Started by mpirun or srun (and built with MPI): this process's part in the
// training job, with every rank's slot weights exchanged; null otherwise.
absl::StatusOr<std::shared_ptr<RankJob>> JoinRankJob(const ServerOptions& options,
                                                     const ServingOptions& serving) {
#if REPLICAD_WITH_MPI
  if (!MpiTrainingRanks::LaunchedByMpi()) return nullptr;
  std::vector<double> weights;
  for (const SlotAssignment& slot : serving.slots) weights.push_back(slot.weight);
  MpiTrainingRanks::Options rank_options;
  rank_options.timeout = absl::Seconds(options.rank_timeout_seconds);
  rank_options.on_broken = [](const absl::Status& status) {
    std::cerr << "replicad: " << status.message() << std::endl;
    ::kill(::getpid(), SIGTERM);  // Ends the sigwait in Serve: the daemon stops.
  };
  absl::StatusOr<std::shared_ptr<MpiTrainingRanks>> ranks =
      MpiTrainingRanks::Create(weights, std::move(rank_options));
  if (!ranks.ok()) return ranks.status();
  std::cout << "replicad: rank " << (*ranks)->rank() << " of " << (*ranks)->size() << " (pid "
            << ::getpid() << "), " << (*ranks)->slot_weights().size() << " slots in the job"
            << std::endl;
  return std::shared_ptr<RankJob>(*std::move(ranks));
#else
  (void)options;
  (void)serving;
  return nullptr;
#endif
}

// A rank other than 0 runs rank 0's commands on a thread of its own until
// rank 0 ends the job, the group breaks (either stops the daemon, as a
// signal would) or Stop.
class RankWorkerThread {
 public:
  RankWorkerThread(RankJob& job, ModelManager& models)
      : job_(job), thread_([this, &models] {
          ended_ = RunRankWorker(job_, models, stop_);
          if (!stop_.load()) ::kill(::getpid(), SIGTERM);  // Ends the sigwait in Serve.
        }) {}
  ~RankWorkerThread() { Stop(); }
  // The exit status: 0, or kRankGroupBroken when the group broke.
  int Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    const int rank = job_.training_ranks()->rank();
    if (ended_.ok() || absl::IsCancelled(ended_)) return 0;
    std::cerr << "replicad: rank " << rank << ": " << ended_.message() << std::endl;
    return kRankGroupBroken;
  }

 private:
  RankJob& job_;
  std::atomic<bool> stop_{false};
  absl::Status ended_;
  std::thread thread_;
};

// A rank other than 0 of a job whose clients talk to rank 0 alone.
int ServeRank(RankJob& job, ModelManager& models, sigset_t& stop_signals) {
  RankWorkerThread worker(job, models);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  const int status = worker.Stop();
  if (status == 0)
    std::cout << "replicad: rank " << job.training_ranks()->rank() << " stopped" << std::endl;
  return status;
}

// Rank R of a job whose ranks all serve listens on each port plus R (port
// 0, any free port, stays 0), and on a Unix socket path with ".R" appended,
// so that ranks on one host do not collide.
void OffsetListenPorts(ServerOptions* options, int rank) {
  if (IsUnixSocketAddress(options->listen)) absl::StrAppend(&options->listen, ".", rank);
  for (std::string* address : {&options->listen, &options->http_listen, &options->metrics_listen}) {
    if (IsUnixSocketAddress(*address)) continue;
    const size_t colon = address->rfind(':');
    int port = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(address->substr(colon + 1), &port) ||
        port == 0) {
      continue;
    }
    *address = absl::StrCat(address->substr(0, colon + 1), port + rank);
  }
}

int Serve(ServerOptions options) {
  RateLimitProtobufLogs();
  RateLimitGrpcLogs();
  // Block the stop signals before any thread starts, so every thread inherits
  // the mask and only the sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return Fail(devices.status());
  absl::StatusOr<ServingOptions> serving = MakeServingOptions(options, *devices);
  if (!serving.ok()) return Fail(serving.status());
  if (absl::Status s = CheckModelControl(options); !s.ok()) return Fail(s);
  if (absl::Status s = CheckDoorLimits(options); !s.ok()) return Fail(s);
  absl::StatusOr<std::vector<ModelSource>> flags = ModelFlags(options);
  if (!flags.ok()) return Fail(flags.status());
  absl::StatusOr<std::shared_ptr<RankJob>> job = JoinRankJob(options, *serving);
  if (!job.ok()) return Fail(job.status());
  // What this process calls itself on its listening lines: a rank other
  // than 0 says which (scripts and tests find rank 0's lines as ever).
  std::string who;
  if (*job != nullptr && !(*job)->leads()) {
    const TrainingRanks& ranks = *(*job)->training_ranks();
    who = absl::StrCat("rank ", ranks.rank(), " of ", ranks.size(), ": ");
    OffsetListenPorts(&options, ranks.rank());
  }

  metrics::Registry registry;
  ServerMetrics server_metrics(registry);
  for (const SlotAssignment& slot : serving->slots) {
    server_metrics.AddDeviceSlot(DeviceIdToString(slot.device));
  }
  CheckpointRoot checkpoints;
  if (!options.checkpoint_root.empty()) {
    absl::StatusOr<CheckpointRoot> opened = CheckpointRoot::Open(options.checkpoint_root);
    if (!opened.ok()) return Fail(opened.status());
    checkpoints = *std::move(opened);
  }
  // Declared before the manager: the versions it retires are freed there.
  Retirer retirer;
  const int load_threads =
      options.model_load_threads > 0
          ? options.model_load_threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ModelManager models(
      std::make_unique<LocalModelRepository>(LocalModelRepository::Config{
          options.model_repository, *flags, *devices, *serving, &server_metrics, &retirer,
          checkpoints, options.keep_checkpoints, *job, options.rank_shards}),
      retirer, load_threads);
  // A training job's ranks load their models before they meet; a daemon of
  // its own opens its doors first (liveness at once, readiness once loaded).
  const bool listen_first = *job == nullptr;
  if (!listen_first) {
    if (absl::Status s = LoadStartupModels(options, models); !s.ok()) return Fail(s);
    PrintReadyModels(models);
    if (absl::Status s = (*job)->AwaitEveryRank(); !s.ok()) return Fail(s);
    // Only rank 0 answers clients (one job, one front door), unless every
    // rank takes its own shards.
    if (!(*job)->leads() && !options.rank_shards) {
      return ServeRank(**job, models, stop_signals);
    }
  }
  std::optional<RankWorkerThread> rank_worker;
  if (*job != nullptr && !(*job)->leads()) rank_worker.emplace(**job, models);

  // GPU telemetry through NVML where the driver provides it; the daemon runs without.
  std::unique_ptr<GpuMetrics> gpu_metrics;
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry = GpuTelemetry::Load();
  if (telemetry.ok()) {
    gpu_metrics = std::make_unique<GpuMetrics>(registry, *std::move(telemetry), absl::Seconds(5));
    std::cout << "replicad: GPU metrics from NVML, refreshed every 5 s" << std::endl;
  } else {
    std::cout << "replicad: no GPU metrics: " << telemetry.status().message() << std::endl;
  }

  ServingCore::Options core_options;
  core_options.observer = &server_metrics;
  core_options.explicit_model_control = options.model_control_mode == "explicit";
  core_options.loading_startup_models = listen_first;
  ServingCore core(models, core_options);
  const TlsFiles tls{options.tls_cert, options.tls_key, options.tls_client_ca};
  if (absl::Status s = CheckTlsFiles(tls); !s.ok()) return Fail(s);
  std::unique_ptr<AccessTokens> tokens;
  if (!options.auth_tokens.empty()) {
    absl::StatusOr<std::unique_ptr<AccessTokens>> opened = AccessTokens::Open(options.auth_tokens);
    if (!opened.ok()) return Fail(opened.status());
    tokens = *std::move(opened);
  } else if (options.metrics_auth) {
    return Fail(absl::InvalidArgumentError("--metrics-auth needs --auth-tokens"));
  }
  WarnIfExposed(options, tls, tokens != nullptr);
  // Freed plans and batches go back to the system (see memory_trimmer.h).
  MemoryTrimmer trimmer(absl::Seconds(2), size_t{64} << 20);
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (!options.metrics_listen.empty()) {
    MetricsHttpServer::Options metrics_options;
    metrics_options.ready = [&core] { return core.ServerReady(); };
    // No client certificates here: probes and Prometheus reach it with a
    // server certificate alone (and a token under --metrics-auth).
    metrics_options.tls = TlsFiles{tls.cert, tls.key, ""};
    if (options.metrics_auth) {
      metrics_options.authorize = [&tokens](const HttpRequest& request) {
        return tokens->Check(request.Header("authorization"), "Metrics");
      };
    }
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::Start(options.metrics_listen, registry, std::move(metrics_options));
    if (!started.ok()) return Fail(started.status());
    metrics_server = *std::move(started);
    std::cout << "replicad: " << who << "metrics on port " << metrics_server->port()
              << " (/metrics)" << std::endl;
  }

  std::unique_ptr<SharedMemoryRegistry> shared_memory;
  if (options.system_shared_memory) shared_memory = std::make_unique<SharedMemoryRegistry>();
  InferenceHttpService http_door(core, server_metrics, shared_memory.get(), tokens.get());
  std::unique_ptr<HttpServer> http_server;
  if (!options.http_listen.empty()) {
    HttpServer::Options http_options;
    http_options.name = "HTTP endpoint (--http-listen)";
    http_options.body_limit = static_cast<size_t>(options.http_max_body_bytes);
    http_options.header_limit = 64 * 1024;
    http_options.threads = options.http_threads;
    http_options.max_connections = options.http_max_connections;
    http_options.render_error = &InferenceHttpService::ErrorResponse;
    http_options.tls = tls;
    http_options.screen = [&http_door](const HttpRequest& head) { return http_door.Screen(head); };
    absl::StatusOr<std::unique_ptr<HttpServer>> started =
        HttpServer::Start(options.http_listen, std::move(http_options), http_door.AsHandler());
    if (!started.ok()) return Fail(started.status());
    http_server = *std::move(started);
    std::cout << "replicad: " << who << "HTTP listening on port " << http_server->port()
              << " (Open Inference Protocol /v2)" << std::endl;
  }

  // One pool for both doors' tensor bytes, so that the cap is the daemon's.
  auto tensor_buffers =
      std::make_shared<HostBufferPool>(static_cast<size_t>(options.grpc_buffer_pool_bytes));
  ReplicadService service(core, *devices, server_metrics, tokens.get(), tensor_buffers);
  InferenceService inference(core, server_metrics, shared_memory.get(), tokens.get(),
                             tensor_buffers);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (absl::Status s = CheckUnixSocketUnused(options.listen); !s.ok()) return Fail(s);
  grpc::ServerBuilder builder;
  int port = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials = GrpcCredentials(tls);
  // Tokens checked from the metadata, before a message is read (TLS only:
  // gRPC runs no processor on plain-text listeners).
  if (tokens != nullptr && tls.enabled()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<TokenAuthProcessor>(*tokens));
  }
  builder.AddListeningPort(options.listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(&service);
  builder.RegisterService(&inference);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  // gRPC reports no port for a Unix socket (1 today).
  if (server == nullptr || (port == 0 && !IsUnixSocketAddress(options.listen))) {
    return Fail(
        absl::UnavailableError(absl::StrCat("cannot listen on '", options.listen, "' (--listen)")));
  }
  std::cout << "replicad: " << who << "gRPC listening on "
            << (IsUnixSocketAddress(options.listen) ? options.listen : absl::StrCat("port ", port))
            << " (replicad.v1, inference.GRPCInferenceService, grpc.health.v1, reflection)"
            << std::endl;
  HealthPublisher health(server->GetHealthCheckService(), [&core] { return core.ServerReady(); });
  StartupLoad startup(options, models, core, health, listen_first, who);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  if (startup.failed()) {
    std::cerr << "replicad: stopping: a startup model did not load (--exit-on-error)" << std::endl;
  } else {
    std::cout << "replicad: " << (signal_number == SIGINT ? "SIGINT" : "SIGTERM")
              << ": finishing requests in flight" << std::endl;
  }
  // New Predicts are refused (UNAVAILABLE) while those in flight finish, up
  // to the grace period; then the server shuts down at once, cancelling
  // whatever is left. (gRPC's own Shutdown deadline would also wait for idle
  // client connections.)
  startup.Stop();
  core.StartDraining();
  health.Publish();
  const bool idle = core.AwaitIdle(absl::Seconds(options.shutdown_grace_seconds));
  if (!idle) {
    std::cout << "replicad: grace period over; cancelling requests still in flight" << std::endl;
    // Queued requests are answered UNAVAILABLE without running, running
    // batches stop at their next kernel: otherwise they would run to their
    // end (seconds to minutes on a CPU) while Shutdown and the destructors
    // below wait for them, past any orchestrator's patience.
    core.StopInFlight();
  }
  // Idle means every answer was handed to gRPC, not that it was sent: a
  // large one may still be on the wire, so the calls get a moment to finish
  // (gRPC cancels what is left then), unless the grace period is over.
  constexpr auto kAnswersInTransit = std::chrono::seconds(2);
  server->Shutdown(std::chrono::system_clock::now() +
                   (idle ? kAnswersInTransit : std::chrono::seconds(0)));
  server->Wait();
  // Its answers still out are dropped; it waits for them.
  if (http_server) http_server->Stop();
  if (metrics_server) metrics_server->Stop();
  if (rank_worker) return rank_worker->Stop();
  if (*job != nullptr) {
    absl::MutexLock order(&(*job)->command_order());
    if ((*job)->SendCommand(EncodeRankCommand(RankCommand{})).ok()) {
      std::cout << "replicad: stopped, and so did the other ranks" << std::endl;
      return 0;
    }
    return kRankGroupBroken;
  }
  std::cout << "replicad: stopped" << std::endl;
  return startup.failed() ? 1 : 0;
}

}  // namespace
}  // namespace replicad

int main(int argc, char** argv) {
  using replicad::ServerOptions;
  // Debian's Abseil is built with deadlock detection on, which records every
  // Mutex acquisition in one process-wide graph under a global lock; the
  // tests keep it, the daemon has no use for it on its request path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before any thread allocates: large blocks freed go back to the system.
  replicad::MemoryTrimmer::MapAllocationsFrom(replicad::MemoryTrimmer::kDefaultMapBytes);
  CLI::App app{"replicad: serves ONNX models over gRPC, splitting every batch across replicas"};
  app.require_subcommand(1);
  ServerOptions options;
  CLI::App* serve = app.add_subcommand("serve", "Serve models until SIGINT or SIGTERM");
  serve
      ->add_option(
          "--listen", options.listen,
          "gRPC address: HOST:PORT (port 0: any free port), or unix:PATH for clients on this host")
      ->capture_default_str();
  serve
      ->add_option("--metrics-listen", options.metrics_listen,
                   "Prometheus /metrics address, HOST:PORT; empty disables it")
      ->capture_default_str();
  serve
      ->add_option("--http-listen", options.http_listen,
                   "Open Inference Protocol HTTP/REST address, HOST:PORT; empty disables it")
      ->capture_default_str();
  serve
      ->add_option("--http-max-body-bytes", options.http_max_body_bytes,
                   "Largest HTTP request body accepted (413 beyond it)")
      ->capture_default_str();
  serve
      ->add_option("--http-threads", options.http_threads,
                   "Threads that read, decode and answer HTTP requests")
      ->capture_default_str();
  serve
      ->add_option("--http-max-connections", options.http_max_connections,
                   "HTTP connections open at once; more are closed as they come")
      ->capture_default_str();
  serve
      ->add_flag("--system-shared-memory,!--no-system-shared-memory", options.system_shared_memory,
                 "Let clients on this host register POSIX shared-memory regions for tensors")
      ->capture_default_str();
  serve->add_option("--model-repository", options.model_repository,
                    "Serve every DIR/NAME/model.onnx as NAME");
  serve->add_option("--model", options.models, "Serve NAME=PATH.onnx (repeatable)");
  serve
      ->add_option("--model-control-mode", options.model_control_mode,
                   "none: load every model at start; explicit: load --load-model names, then "
                   "ModelLoad/ModelUnload; poll: follow the repository's changes")
      ->capture_default_str();
  serve->add_option("--load-model", options.load_models,
                    "explicit mode: a model to load at start (repeatable; '*': all)");
  serve
      ->add_option("--model-load-threads", options.model_load_threads,
                   "Models loaded side by side (at start, and by one poll or load call); 0: one "
                   "per core")
      ->capture_default_str();
  serve
      ->add_flag("--exit-on-error,!--no-exit-on-error", options.exit_on_error,
                 "A startup model that fails to load stops the daemon (exit 1); with "
                 "--no-exit-on-error (or --exit-on-error=false) the others serve and the "
                 "repository index gives the failed model's reason")
      ->capture_default_str();
  serve
      ->add_option("--repository-poll-seconds", options.repository_poll_seconds,
                   "poll mode: seconds between looks at the repository")
      ->capture_default_str();
  serve
      ->add_option("--devices", options.devices,
                   "Slots: 'all' or a list like cpu:0,cpu:1 (repeat a device for more slots)")
      ->capture_default_str();
  serve->add_option("--device-map", options.device_map,
                    "Theano-style slot map, e.g. 'r0->cpu0;r1->cpu0' (replaces --devices)");
  serve
      ->add_option("--slot-weights", options.slot_weights,
                   "Batch share per slot: 'auto' (each slot's measured speed per model) or "
                   "fixed weights, one per slot, e.g. 3,1")
      ->capture_default_str();
  serve
      ->add_option("--merge-device", options.merge_device,
                   "Where outputs are merged: cpu:0, or a GPU (cuda:N) by peer copies")
      ->capture_default_str();
  serve
      ->add_option("--transfer-chunks", options.transfer_chunks,
                   "GPU slots: cut a slice of at least 8 MiB per chunk into up to N chunks "
                   "whose copies overlap the compute (1: whole slices)")
      ->capture_default_str();
  serve
      ->add_flag("--shrink-on-oom,!--no-shrink-on-oom", options.shrink_on_oom,
                 "GPU slots: when a slice's plans do not fit in the GPU's memory, run it in "
                 "smaller chunks instead of failing the request with RESOURCE_EXHAUSTED")
      ->capture_default_str();
  serve
      ->add_option("--warmup-max-rows", options.warmup_max_rows,
                   "Before a model is served, each slot builds and times the plans of 1, 2 and "
                   "the powers of two up to this many rows (and the preferred and model_warmup "
                   "batch sizes); other sizes are built on first use")
      ->capture_default_str();
  serve
      ->add_option("--max-plans-per-slot", options.max_plans_per_slot,
                   "Execution plans (one per slice size) each slot keeps; the least recently "
                   "used is dropped beyond this and rebuilt when next needed")
      ->capture_default_str();
  serve
      ->add_option("--weight-file-dir", options.weight_file_dir,
                   "Where models keep their large weights (64 KiB and up) in unlinked files, "
                   "mapped, so that after warm-up only the slots' copies stay resident: a "
                   "directory, auto ($TMPDIR or /tmp, unless in memory) or none (anonymous "
                   "memory); needs as much disk as the models' weights")
      ->capture_default_str();
  serve
      ->add_option("--plan-memory-per-slot", options.plan_memory_per_slot,
                   "Bytes of plan memory (intermediate values, scratch, constants) each slot "
                   "keeps cached; least recently used plans are dropped beyond it, and a plan "
                   "larger than it runs uncached (0: a quarter of the device's memory, divided "
                   "among the model's slots on that device)")
      ->capture_default_str();
  serve
      ->add_option("--threads-per-slot", options.threads_per_slot,
                   "OpenMP threads of each CPU slot")
      ->capture_default_str();
  serve
      ->add_flag("--winograd,!--no-winograd", options.winograd,
                 "CPU slots: run 3x3 stride-1 convolutions as Winograd (faster; "
                 "--no-winograd for direct convolutions)")
      ->capture_default_str();
  serve
      ->add_flag("--tf32,!--no-tf32", options.tf32,
                 "CUDA slots: TF32 tensor cores for float32 convolutions and matrix products "
                 "(faster, 10-bit mantissa products; off by default)")
      ->capture_default_str();
  serve
      ->add_option("--max-batch-size", options.max_batch_size,
                   "Reject larger batches with INVALID_ARGUMENT (0: no limit)")
      ->capture_default_str();
  serve
      ->add_flag("--dynamic-batching,!--no-dynamic-batching", options.dynamic_batching,
                 "Models without a config.pbtxt: fuse queued requests into batches (off: each "
                 "request runs as its own batch)")
      ->capture_default_str();
  serve
      ->add_option("--max-queue-delay-us", options.max_queue_delay_us,
                   "Models without a config.pbtxt: microseconds a request may wait for a batch "
                   "to fill while a slot is free")
      ->capture_default_str();
  serve->add_option("--preferred-batch-sizes", options.preferred_batch_sizes,
                    "Models without a config.pbtxt: batch sizes to stop at, e.g. 4,8 "
                    "(default: none)");
  serve
      ->add_option("--max-queue-size", options.max_queue_size,
                   "Models without a config.pbtxt: requests queued at most; more get "
                   "UNAVAILABLE (0: no bound)")
      ->capture_default_str();
  serve
      ->add_option("--max-queue-bytes", options.max_queue_bytes,
                   "Every model: bytes of request inputs queued or running at most; more get "
                   "RESOURCE_EXHAUSTED (0: no bound)")
      ->capture_default_str();
  serve
      ->add_option("--max-message-bytes", options.max_message_bytes,
                   "Largest gRPC request or response; larger requests get RESOURCE_EXHAUSTED")
      ->capture_default_str();
  serve
      ->add_option("--grpc-buffer-pool-bytes", options.grpc_buffer_pool_bytes,
                   "Idle bytes kept for gRPC tensors (Predict and ModelInfer gather requests "
                   "into pooled buffers and answer from them; 0: none kept)")
      ->capture_default_str();
  serve
      ->add_option("--shutdown-grace-seconds", options.shutdown_grace_seconds,
                   "On SIGINT/SIGTERM, how long requests in flight may take to finish")
      ->capture_default_str();
  serve->add_option("--checkpoint-root", options.checkpoint_root,
                    "Directory that SaveCheckpoint and periodic checkpoints write under (paths "
                    "are relative to it and may not leave it); empty: no checkpoints");
  serve->add_option("--tls-cert", options.tls_cert,
                    "PEM certificate chain: every listener (gRPC, HTTP, metrics) serves TLS; "
                    "re-read when it changes");
  serve->add_option("--tls-key", options.tls_key, "PEM private key of --tls-cert");
  serve->add_option("--tls-client-ca", options.tls_client_ca,
                    "PEM CA certificates: clients must present a certificate they signed (mTLS)");
  serve->add_option("--auth-tokens", options.auth_tokens,
                    "File of bearer tokens, one '<token> <role>[,<role>...]' a line (roles infer, "
                    "train, admin, metrics); re-read when it changes; empty: no auth");
  serve->add_flag("--metrics-auth", options.metrics_auth,
                  "/metrics needs a token with the role metrics (/healthz stays open)");
  serve
      ->add_option("--keep-checkpoints", options.keep_checkpoints,
                   "Numbered checkpoints (periodic, or SaveCheckpoint without a path) kept per "
                   "model; older ones are removed once a newer one is written")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve
      ->add_option("--rank-timeout-seconds", options.rank_timeout_seconds,
                   "Started by mpirun or srun: how long a rank may take to answer before the step "
                   "fails naming it and the job exits (for its launcher to restart it)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_flag("--rank-shards", options.rank_shards,
                  "Started by mpirun or srun: every rank serves on its own ports (each --*-listen "
                  "port plus the rank; rank R > 0 of --listen unix:PATH on PATH.R) and takes its "
                  "own shard of each step (TrainStep with "
                  "shard), as with a data loader per rank; without it rank 0 alone answers and "
                  "splits whole batches over every rank");
  CLI::App* devices = app.add_subcommand("devices", "List this machine's devices and exit");
  CLI::App* default_model = app.add_subcommand(
      "default-model", "Write the embedded default model (ONNX, initial weights) and exit");
  std::string default_model_path;
  default_model->add_option("--output", default_model_path, "ONNX file to write")->required();
  CLI11_PARSE(app, argc, argv);

  if (default_model->parsed()) {
    std::ofstream out(default_model_path, std::ios::binary);
    out << replicad::DefaultModelOnnxBytes();
    out.close();
    if (!out) {
      return replicad::Fail(
          absl::PermissionDeniedError(absl::StrCat("cannot write '", default_model_path, "'")));
    }
    return 0;
  }

  if (devices->parsed()) {
    absl::StatusOr<std::vector<replicad::DeviceInfo>> found = replicad::EnumerateDevices();
    if (!found.ok()) return replicad::Fail(found.status());
    replicad::PrintDevices(*found);
    return 0;
  }
  return replicad::Serve(options);
}
