#ifndef REPLICAD_SERVER_SERVER_OPTIONS_H_
#define REPLICAD_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace replicad {

// Everything `replicad serve` is configured with (see --help).
struct ServerOptions {
  std::string listen = "0.0.0.0:8500";
  std::string metrics_listen = "0.0.0.0:9090";  // Empty: no metrics endpoint.
  // The Open Inference Protocol's HTTP/REST door. Empty: none.
  std::string http_listen = "0.0.0.0:8000";
  int64_t http_max_body_bytes = 64ll << 20;  // As Triton's --http-max-input-size.
  int http_threads = 4;
  int http_max_connections = 1024;  // Open at once; keeps descriptors for gRPC.
  // Clients may register POSIX shared-memory regions and have the daemon
  // read inputs from and write outputs into them (Triton's extension).
  bool system_shared_memory = true;
  std::string model_repository;
  // Models sent with a load request are written here (model_upload.h); empty: none.
  std::string model_upload_root;
  int64_t max_upload_bytes = 1ll << 30;  // One upload's files and configuration.
  std::vector<std::string> models;       // NAME=PATH each.
  std::string devices = "all";
  std::string device_map;  // Theano-style; replaces --devices when set.
  // "auto": split by each slot's measured speed; "3,1": fixed, one per slot.
  std::string slot_weights = "auto";
  std::string merge_device = "cpu:0";
  int transfer_chunks = 4;     // GPU slots: most chunks a slice's transfers overlap in.
  bool shrink_on_oom = false;  // GPU slots: smaller chunks instead of RESOURCE_EXHAUSTED.
  // Execution plans each slot caches; the least recently used go beyond it.
  int64_t max_plans_per_slot = 16;
  int64_t plan_memory_per_slot = 0;
  std::string weight_file_dir = "auto";  // A directory, auto or none.  // Bytes; 0: a quarter of
                                         // the device's memory over its slots.
  int64_t warmup_max_rows = 2;           // See SchedulerOptions::warmup_max_rows.
  int model_load_threads = 0;            // 0: one per core.
  bool exit_on_error = true;             // A startup model that fails to load stops the daemon.
  int threads_per_slot = 1;
  bool winograd = true;             // CPU slots: Winograd for 3x3 stride-1 convolutions.
  bool lend_idle_cores = true;      // CPU slots of one thread: see SlotOptions.
  int cpu_kernel_cache = 1024;      // CPU slots: compiled kernels cached beyond the plans'.
  bool tf32 = false;                // CUDA slots: TF32 tensor cores for float32 convs and GEMMs.
  bool cudnn_deterministic = true;  // CUDA slots: reproducible cuDNN convolution algorithms.
  bool cuda_graphs = false;         // CUDA slots: plans' runs recorded as CUDA graphs.
  // Model parallelism: nodes placed over the slots (core/model/placement.h),
  // for models whose config.pbtxt has no placement; "" serves them whole.
  std::string placement;
  int micro_batches = 0;          // Of a placed model's batches; 0: four per part.
  int64_t slot_memory_limit = 0;  // Bytes of weights a slot may hold; 0: no bound.
  std::string precision =
      "fp32";                  // Float32 models' products: fp32, bf16, tf32 (compute_precision.h).
  int64_t max_batch_size = 0;  // 0: no limit.
  // The scheduling of models without a config.pbtxt (SchedulerOptions).
  bool dynamic_batching = true;
  int64_t max_queue_delay_us = 0;
  std::string preferred_batch_sizes;           // "4,8"; empty: none.
  int64_t max_queue_size = 0;                  // Per level; 0: no bound.
  int64_t max_queue_bytes = int64_t{1} << 30;  // Every model's; 0: no bound.
  int64_t max_message_bytes = 256ll << 20;     // gRPC send and receive limit.
  double shutdown_grace_seconds = 30;          // In-flight RPCs get this long on SIGTERM.
  // Idle bytes kept for the gRPC doors' tensors (HostBufferPool's cap).
  int64_t grpc_buffer_pool_bytes = 128ll << 20;
  // The directory clients' checkpoints are written under; empty: none are.
  std::string checkpoint_root;
  int keep_checkpoints = 5;  // Numbered checkpoints kept per model (>= 1).
  // Under an MPI launcher: how long a rank may take to answer before the
  // step fails naming it and the job exits for a restart.
  double rank_timeout_seconds = 60;
  // Under an MPI launcher: every rank takes its own shard of each step
  // (TrainStep with shard) on its own port, instead of rank 0 whole batches.
  bool rank_shards = false;
  // TLS on every listener (server/tls_files.h); empty: plain text.
  std::string tls_cert, tls_key, tls_client_ca;
  // Bearer tokens and their roles (server/auth/access_tokens.h); empty: no auth.
  std::string auth_tokens;
  bool metrics_auth = false;  // /metrics needs a token with the role metrics.
  // Triton's model control: none (load everything at start, fixed), explicit
  // (load --load-model names at start; ModelLoad/ModelUnload while serving),
  // poll (load everything, then follow the repository's changes).
  std::string model_control_mode = "none";
  std::vector<std::string> load_models;  // explicit mode; "*" loads every model.
  double repository_poll_seconds = 15;
  // The log (core/base/log.h): "text" or "json" lines; verbose level, 0 none
  // (Triton's --log-verbose), 1 adds a line per request answered.
  std::string log_format = "text";
  int log_verbose = 0;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_SERVER_OPTIONS_H_
