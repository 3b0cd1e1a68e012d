#include "server/daemon_config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/backends/backends.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/device/device_map.h"
#include "core/model/weight_file.h"
#include "server/grpc/unix_socket_address.h"

namespace replicad {
namespace {

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
  REPLICAD_RETURN_IF_ERROR(scheduling.Validate());
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
  serving.slot_options.lend_idle_cores = options.lend_idle_cores;
  serving.slot_options.tf32 = options.tf32;
  serving.slot_options.cudnn_deterministic = options.cudnn_deterministic;
  serving.slot_options.cuda_graphs = options.cuda_graphs;
  serving.placement = options.placement;
  serving.micro_batches = options.micro_batches;
  serving.slot_memory_limit = static_cast<size_t>(options.slot_memory_limit);
  REPLICAD_ASSIGN_OR_RETURN(serving.precision,
                            ParseComputePrecision(options.precision, "--precision"));
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      options.device_map.empty() ? ParseDeviceList(options.devices, devices,
                                                   DefaultSlots(devices, options.threads_per_slot))
                                 : ParseDeviceMap(options.device_map, devices);
  if (!slots.ok()) return slots.status();
  if (options.slot_weights != "auto") {
    REPLICAD_RETURN_IF_ERROR(ApplySlotWeights(options.slot_weights, &*slots));
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
  REPLICAD_ASSIGN_OR_RETURN(std::string weight_dir, WeightFileDir(options.weight_file_dir));
  serving.weight_file_dir = std::move(weight_dir);
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
    REPLICAD_ASSIGN_OR_RETURN(ModelSource source, ParseModelFlag(flag));
    sources.push_back(std::move(source));
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

bool IsLoopback(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host == "[::1]" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

absl::StatusOr<DaemonConfig> MakeDaemonConfig(const ServerOptions& options,
                                              const std::vector<DeviceInfo>& devices) {
  DaemonConfig config;
  REPLICAD_ASSIGN_OR_RETURN(config.serving, MakeServingOptions(options, devices));
  REPLICAD_RETURN_IF_ERROR(CheckModelControl(options));
  REPLICAD_RETURN_IF_ERROR(CheckDoorLimits(options));
  REPLICAD_ASSIGN_OR_RETURN(config.models, ModelFlags(options));
  return config;
}

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
  LogWarning(absl::StrCat(
      "listening beyond loopback (", exposed, ") ", tls.enabled() ? "with TLS but" : "without TLS",
      tls.enabled() ? "" : ": requests, tokens and tensors cross the network in clear text",
      admits_anyone ? (tls.enabled() ? " without --auth-tokens or --tls-client-ca: " : "; ") : "; ",
      admits_anyone ? "anyone who connects may call TrainStep, ConfigureTraining and "
                      "SaveCheckpoint"
                    : "",
      admits_anyone && options.model_control_mode == "explicit" ? " and load or unload models" : "",
      admits_anyone ? "; " : "",
      "serve with --tls-cert/--tls-key and --auth-tokens, or listen on 127.0.0.1"));
}

}  // namespace replicad
