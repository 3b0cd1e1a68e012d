#ifndef REPLICAD_CORE_SERVE_SERVING_CORE_H_
#define REPLICAD_CORE_SERVE_SERVING_CORE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/worker_pool.h"
#include "core/serve/model_manager.h"
#include "core/serve/request_context.h"
#include "core/serve/request_validation.h"
#include "core/serve/serving_observer.h"
#include "core/serve/train_step_queue.h"

namespace replicad {

// An inference request in the core's terms; each protocol decodes into it.
struct InferRequest {
  std::string model;
  int64_t version = 0;               // 0: the latest ready version.
  std::vector<RequestInput> inputs;  // Viewing the protocol's request bytes.
  std::vector<std::string> outputs;  // Empty: every output.
  // The protocol's names for these fields, used in error messages.
  std::string model_field = "model";
  std::string outputs_field = "output_names";
};

// Where a protocol wants an inference's outputs: memory in its own response.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // Host memory for the requested output `spec` (of `type` in this answer),
  // at least its byte size, valid until the done callback has returned.
  // Called in model output order, before any slot runs.
  virtual absl::StatusOr<void*> AddOutput(const TensorSpec& spec, const TensorType& type) = 0;
};

// Which slot ran which rows of a request.
struct SliceReport {
  std::string slot, device;
  int64_t begin = 0, end = 0;
};

// The one request path every protocol calls: admission and draining, model
// lookup by name and version, input validation, output selection, handing
// the request to the model's Scheduler, statistics, readiness, and model
// loading. Protocol front doors decode, call, and encode.
//
// Thread-safe. Nothing here blocks its caller: work that may (building
// plans, training, loading) runs on the schedulers' threads, the control
// pool or the training side's thread, and the done callbacks run there or
// on slot threads, never before the call returns unless the request failed
// its checks or was refused by the queue.
class ServingCore final : public TrainStepQueue {
 public:
  struct Options {
    ServingObserver* observer = nullptr;  // Optional; must outlive the core.
    // Triton's --model-control-mode explicit: clients may load and unload
    // models. Otherwise LoadModel and UnloadModel are FailedPrecondition.
    bool explicit_model_control = false;
    // The startup models load after the doors open (the daemon answers
    // liveness at once): until StartupModelsLoaded the server is not ready,
    // and a model that is not found yet is Unavailable as loading rather
    // than NotFound, since the load may yet bring it.
    bool loading_startup_models = false;
    // Admission times, the statistics' durations and AwaitIdle's timeout.
    const Clock* clock = RealClock();
  };
  // `models` must outlive the core.
  ServingCore(ModelManager& models, Options options);
  // Waits for the requests in flight to finish (their done callbacks use the core), then
  // finishes the queued dispatches and loads.
  ~ServingCore();

  struct InferAnswer {
    std::shared_ptr<LoadedModel> model;  // Null when the lookup failed.
    std::vector<SliceReport> slices;
  };
  using InferDone = absl::AnyInvocable<void(absl::Status status, InferAnswer answer) &&>;
  // Runs `request` and writes its outputs through `writer` (which must stay
  // valid until `done` has returned). Errors name the protocol's field:
  // Unavailable while draining; NotFound for an unknown model or version;
  // InvalidArgument for inputs (see BindInputs) or outputs the model lacks;
  // the scheduler's refusals (Unavailable for a full queue,
  // ResourceExhausted past max_queue_bytes, DeadlineExceeded or Cancelled
  // while queued); the servable's error otherwise. `done` runs exactly once.
  void Infer(InferRequest request, RequestContext context, ResponseWriter* writer, InferDone done);

  // One training step, queued in the model's Scheduler like an inference
  // (its priority, deadline, queue policy and bounds apply) and run on the
  // training side's thread once the batches ahead of it in the queue (its
  // priority level's earlier ones, and any of a higher level) have finished;
  // batches behind it wait for it. Errors as Infer's, plus InvalidArgument
  // for targets (BindTargets) and FailedPrecondition for a model that cannot
  // be trained here.
  void TrainStep(TrainRequest request, RequestContext context, TrainDone done);

  // TrainStepQueue: TrainStep in two halves (TrainStepStream's); admission
  // is TrainBound's.
  absl::StatusOr<BoundTrainStep> BindTrainStep(const TrainRequest& request,
                                               std::shared_ptr<const void> keep_alive,
                                               std::shared_ptr<LoadedModel>* found) override;
  void TrainBound(BoundTrainStep step, RequestContext context, TrainDone done) override;
  void ExpectTrainStep(const BoundTrainStep& step) override;
  void WithdrawTrainStep(const BoundTrainStep& step) override;

  // TrainingSession's Configure and SaveCheckpoint for `model`'s latest
  // version, with their errors, and Unavailable while draining, NotFound
  // naming `model`, FailedPrecondition for a model that cannot be trained
  // here. They run on its training thread, after the steps already handed to
  // it, not in the model's queue.
  using ConfigureDone =
      absl::AnyInvocable<void(absl::StatusOr<TrainingConfig> applied, int64_t step,
                              std::shared_ptr<LoadedModel> model) &&>;
  void ConfigureTraining(const std::string& model, TrainingConfig config, ConfigureDone done);
  using SaveDone = absl::AnyInvocable<void(absl::StatusOr<TrainingSession::Saved> saved,
                                           std::shared_ptr<LoadedModel> model) &&>;
  void SaveCheckpoint(const std::string& model, std::string path, SaveDone done);
  // The model's ONNX file with its current weights (TrainingSession::Export).
  using ExportDone = absl::AnyInvocable<void(absl::StatusOr<TrainingSession::Exported> exported,
                                             std::shared_ptr<LoadedModel> model) &&>;
  void ExportModel(const std::string& model, ExportDone done);

  // A ready version of a model, for metadata; NotFound naming `field`.
  absl::StatusOr<std::shared_ptr<LoadedModel>> FindModel(const std::string& name, int64_t version,
                                                         const std::string& field = "model") const;

  // The startup load has ended (whether or not every model loaded).
  void StartupModelsLoaded();
  // Readiness, one source for every protocol: the server is ready while it
  // is not draining, its startup models have loaded and some model is ready; a model version is
  // ready while the server is not draining, it is loaded, and a slot can run it.
  bool ServerReady() const;
  absl::Status ModelReady(const std::string& name, int64_t version) const;

  using LoadDone = absl::AnyInvocable<void(absl::Status) &&>;
  // Loads (or reloads) / unloads a model on the core's control thread;
  // FailedPrecondition unless model control is explicit.
  void LoadModel(std::string name, LoadDone done);
  void UnloadModel(std::string name, LoadDone done);
  ModelManager& models() { return models_; }

  // New requests get Unavailable; those in flight finish.
  void StartDraining();
  // True once no request is in flight; false if `timeout` passed first.
  bool AwaitIdle(absl::Duration timeout);
  // Once the grace period is over: drains, and every request admitted is
  // answered Unavailable as soon as its scheduler or slot next asks
  // (RequestContext::StillWanted): queued ones without running (within the
  // scheduler's poll, milliseconds), running batches at their next kernel.
  // A training step already running finishes its step. Does not wait.
  void StopInFlight();

 private:
  // Counts an admitted request until destroyed.
  class InFlight;
  std::optional<InFlight> Admit();
  bool draining() const;
  // models_.Find, with a model not found while starting_ Unavailable.
  absl::StatusOr<std::shared_ptr<LoadedModel>> Lookup(const std::string& name,
                                                      int64_t version) const;
  // The latest version's training, for ConfigureTraining and SaveCheckpoint
  // (Unavailable unless `admitted`); `model` is set once the model is found.
  absl::StatusOr<TrainingSession*> TrainingOf(bool admitted, const std::string& name,
                                              std::shared_ptr<LoadedModel>* model) const;

  ModelManager& models_;
  const Options options_;
  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Read by every admitted request's StillWanted, between kernels among
  // other places, hence an atomic rather than mu_.
  std::atomic<bool> stopped_{false};
  std::atomic<bool> starting_;  // Options::loading_startup_models, until loaded.
  WorkerPool control_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SERVING_CORE_H_
