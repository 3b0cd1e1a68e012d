#include "server/flags.h"

namespace replicad {
namespace {

// The doors: addresses, limits and shutdown.
void AddListenerFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Listeners");
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
}

// Which models load, and when.
void AddModelFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Models");
  serve->add_option("--model-repository", options.model_repository,
                    "Serve every DIR/NAME/model.onnx as NAME");
  serve->add_option("--model", options.models, "Serve NAME=PATH.onnx (repeatable)");
  serve->add_option("--model-upload-root", options.model_upload_root,
                    "Accept models sent with a load request (Triton's RepositoryModelLoad config "
                    "and file: parameters, replicad.v1 LoadModel) and keep them under DIR");
  serve
      ->add_option("--max-upload-bytes", options.max_upload_bytes,
                   "Largest model upload (its files and configuration together)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
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
}

// The slots, and what each keeps.
void AddSlotFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Devices and slots");
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
      ->add_flag("--lend-idle-cores,!--no-lend-idle-cores", options.lend_idle_cores,
                 "CPU slots of one thread: a batch that runs on one slot while the model's "
                 "other slots are idle runs with their cores too (one more copy of its plans; "
                 "--no-lend-idle-cores for one core per slot always)")
      ->capture_default_str();
  serve
      ->add_option("--cpu-kernel-cache", options.cpu_kernel_cache,
                   "CPU slots: compiled oneDNN kernels cached beyond those plans hold (makes "
                   "other slots' and rebuilt plans cheaper; keeps evicted plans' kernels); "
                   "0 for the least memory")
      ->capture_default_str();
  serve
      ->add_option("--precision", options.precision,
                   "What float32 models compute their convolutions and weight products in: "
                   "fp32, bf16 (bfloat16 inputs and weights, float32 sums and outputs, "
                   "the rest in float32; CPU slots with AVX512_BF16 or AMX), fp16 (float16 "
                   "tensor cores on CUDA slots; CPU slots compute float32) or tf32 (TF32 "
                   "tensor cores on CUDA slots, as --tf32 for this model; CPU slots compute "
                   "float32); a model's config.pbtxt parameter 'precision' overrides it")
      ->capture_default_str();
  serve
      ->add_flag("--tf32,!--no-tf32", options.tf32,
                 "CUDA slots: TF32 tensor cores for float32 convolutions and matrix products "
                 "(faster, 10-bit mantissa products; off by default)")
      ->capture_default_str();
  serve->add_option("--placement", options.placement,
                    "Model parallelism: place the nodes of models without a config.pbtxt "
                    "placement over the --device-map contexts, 'PATTERN->CONTEXT; ...' (a node "
                    "name glob or prefix, e.g. '/layer3/*->dev1'; unplaced nodes run where their "
                    "inputs do), or 'auto' (cut by measured cost)");
  serve
      ->add_option("--micro-batches", options.micro_batches,
                   "Micro-batches a placed model's batch is cut into (0: four per part)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve
      ->add_option("--slot-memory-limit", options.slot_memory_limit,
                   "Bytes of weights one slot (or one context of a placement) may hold; a model "
                   "over it fails to load there (0: no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve
      ->add_flag("--cudnn-deterministic,!--no-cudnn-deterministic", options.cudnn_deterministic,
                 "CUDA slots: cuDNN convolution algorithms that give the same bits on every run "
                 "(default on); off lets cuDNN pick its fastest, which may sum in a varying order, "
                 "as PyTorch does by default")
      ->capture_default_str();
  serve
      ->add_flag("--cuda-graphs", options.cuda_graphs,
                 "CUDA slots: record a plan's run as a CUDA graph on its second run and replay it "
                 "after, one launch instead of one per kernel (small batches); a plan that cannot "
                 "be recorded runs as ever")
      ->capture_default_str();
}

// How requests queue and batch.
void AddSchedulingFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Scheduling");
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
}

// Checkpoints and training across ranks.
void AddTrainingFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Training");
  serve->add_option("--checkpoint-root", options.checkpoint_root,
                    "Directory that SaveCheckpoint and periodic checkpoints write under (paths "
                    "are relative to it and may not leave it); empty: no checkpoints");
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
}

// TLS and tokens.
void AddSecurityFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Security");
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
}

void AddLogFlags(CLI::App* serve, ServerOptions& options) {
  serve->option_defaults()->group("Logging");
  serve
      ->add_option("--log-format", options.log_format,
                   "Log lines: text (\"replicad: ...\", warnings and errors on stderr) or json "
                   "(one object a line on stdout: time, level, message), for log collectors")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  serve
      ->add_option("--log-verbose", options.log_verbose,
                   "Verbose log level (Triton's --log-verbose): 0 none; 1 adds a line per "
                   "request answered (model, rows, status, queue and compute times)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

}  // namespace

CLI::App* AddServeCommand(CLI::App& app, ServerOptions& options) {
  CLI::App* serve = app.add_subcommand("serve", "Serve models until SIGINT or SIGTERM");
  AddListenerFlags(serve, options);
  AddModelFlags(serve, options);
  AddSlotFlags(serve, options);
  AddSchedulingFlags(serve, options);
  AddTrainingFlags(serve, options);
  AddSecurityFlags(serve, options);
  AddLogFlags(serve, options);
  return serve;
}

}  // namespace replicad
