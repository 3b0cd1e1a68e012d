#include "core/serve/serving_core.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/client_text.h"
#include "core/base/log.h"
#include "core/serve/sequence_buckets.h"

namespace replicad {

class ServingCore::InFlight {
 public:
  explicit InFlight(ServingCore* core) : core_(core) {}
  InFlight(InFlight&& other) : core_(std::exchange(other.core_, nullptr)) {}
  InFlight& operator=(InFlight&&) = delete;
  ~InFlight() {
    if (core_ == nullptr) return;
    absl::MutexLock lock(&core_->mu_);
    --core_->in_flight_;
  }

 private:
  ServingCore* core_;
};

namespace {

// What a request gets once a drain has begun.
absl::Status ShuttingDown() {
  return absl::UnavailableError("replicad is shutting down; send the request elsewhere");
}

// The request log (--log-verbose 1): one line per inference answered.
void LogAnswered(const std::string& id, const std::string& model, int64_t version, int64_t rows,
                 const absl::Status& status, absl::Duration queue, absl::Duration total) {
  LogVerbose(
      1, absl::StrCat(
             "request '", id, "' model '", model, "' version ", version, ", ", rows, " rows: ",
             status.ok()
                 ? "OK"
                 : absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()),
             "; queue ", absl::FormatDuration(queue), ", total ", absl::FormatDuration(total)));
}

absl::Status Prefixed(const std::string& field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

// One inference between admission and its answer. It is the servable's
// output sink: requested outputs go to the protocol's writer, the others
// to scratch memory that is dropped.
struct InferCall : public OutputSink {
  ResponseWriter* writer = nullptr;
  std::shared_ptr<LoadedModel> model;
  std::vector<bool> wanted;
  std::map<int, std::string> scratch;

  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override {
    if (wanted[index]) return writer->AddOutput(model->model().outputs()[index], type);
    std::string& bytes = scratch[index];
    bytes.resize(ByteSize(type));
    return bytes.data();
  }
};

// Which outputs `request` asked for, in model order; InvalidArgument naming
// the field for one the model lacks.
absl::StatusOr<std::vector<bool>> SelectOutputs(const Model& model, const InferRequest& request) {
  std::vector<bool> wanted(model.outputs().size(), request.outputs.empty());
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    const int index = model.OutputIndex(request.outputs[i]);
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          request.outputs_field, "[", i, "]: model '", model.name(), "' has no output '",
          ClientText(request.outputs[i]), "'; expected one of: ",
          absl::StrJoin(model.outputs(), ", ", [](std::string* out, const TensorSpec& s) {
            absl::StrAppend(out, s.name);
          })));
    }
    if (!request.outputs.empty() && wanted[index]) {
      // Two answers under one name would be ambiguous; merging them hides a client bug.
      return absl::InvalidArgumentError(absl::StrCat(request.outputs_field, "[", i, "]: output '",
                                                     request.outputs[i],
                                                     "' is asked for more than once"));
    }
    wanted[index] = true;
  }
  return wanted;
}

std::vector<SliceReport> Reports(const Servable& servable, const std::vector<BatchSlice>& slices) {
  std::vector<SliceReport> reports;
  if (slices.empty()) return reports;
  const std::vector<SlotStatus> slots = servable.Slots();
  for (const BatchSlice& slice : slices) {
    const SlotStatus& slot = slots[slice.slot];
    reports.push_back(SliceReport{slot.slot, slot.device, slice.begin, slice.end});
  }
  return reports;
}

}  // namespace

ServingCore::ServingCore(ModelManager& models, Options options)
    : models_(models), options_(options), starting_(options.loading_startup_models), control_(1) {}

void ServingCore::StartupModelsLoaded() { starting_.store(false); }

absl::StatusOr<std::shared_ptr<LoadedModel>> ServingCore::Lookup(const std::string& name,
                                                                 int64_t version) const {
  absl::StatusOr<std::shared_ptr<LoadedModel>> found = models_.Find(name, version);
  if (absl::IsNotFound(found.status()) && starting_.load()) {
    return absl::UnavailableError(absl::StrCat("'", ClientText(name),
                                               "' is not ready: replicad is still loading "
                                               "its models"));
  }
  return found;
}

ServingCore::~ServingCore() {
  // A request's done callback uses this core, and its in-flight guard is released after the
  // callback returned, on the scheduler's or a slot's thread: whoever saw the answer may
  // destroy the core before that, which would free the mutex the guard still takes.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
}

std::optional<ServingCore::InFlight> ServingCore::Admit() {
  absl::MutexLock lock(&mu_);
  if (draining_) return std::nullopt;
  ++in_flight_;
  return InFlight(this);
}

bool ServingCore::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

void ServingCore::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void ServingCore::StopInFlight() {
  StartDraining();
  stopped_.store(true, std::memory_order_relaxed);
}

bool ServingCore::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return options_.clock->AwaitWithDeadline(
      mu_,
      absl::Condition(
          +[](int* in_flight) { return *in_flight == 0; }, &in_flight_),
      options_.clock->Now() + timeout);
}

absl::StatusOr<std::shared_ptr<LoadedModel>> ServingCore::FindModel(
    const std::string& name, int64_t version, const std::string& field) const {
  absl::StatusOr<std::shared_ptr<LoadedModel>> found = Lookup(name, version);
  if (!found.ok()) return Prefixed(field, found.status());
  return found;
}

bool ServingCore::ServerReady() const {
  if (draining() || starting_.load()) return false;
  for (const std::shared_ptr<LoadedModel>& model : models_.Ready()) {
    if (model->HasHealthySlot()) return true;
  }
  return false;
}

absl::Status ServingCore::ModelReady(const std::string& name, int64_t version) const {
  if (draining()) return absl::UnavailableError("replicad is shutting down");
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = Lookup(name, version);
  if (!model.ok()) return model.status();
  if (!(*model)->HasHealthySlot()) {
    return absl::UnavailableError(absl::StrCat("model '", name, "' version ", (*model)->version,
                                               " is loaded but none of its slots can run it"));
  }
  return absl::OkStatus();
}

void ServingCore::Infer(InferRequest request, RequestContext context, ResponseWriter* writer,
                        InferDone done) {
  const absl::Time admitted = options_.clock->Now();
  std::optional<InFlight> in_flight = Admit();
  if (!in_flight) {
    std::move(done)(ShuttingDown(), {});
    return;
  }
  absl::StatusOr<std::shared_ptr<LoadedModel>> model =
      FindModel(request.model, request.version, request.model_field);
  if (!model.ok()) {
    if (VerboseLogOn(1)) {
      LogAnswered(context.id, request.model, request.version, 0, model.status(),
                  absl::ZeroDuration(), options_.clock->Now() - admitted);
    }
    std::move(done)(model.status(), {});
    return;
  }
  auto fail = [&](const absl::Status& status) {
    const absl::Duration total = options_.clock->Now() - admitted;
    (*model)->statistics->RecordFailure(total);
    if (VerboseLogOn(1)) {
      LogAnswered(context.id, (*model)->name, (*model)->version, 0, status, absl::ZeroDuration(),
                  total);
    }
    std::move(done)(status, InferAnswer{*model, {}});
  };
  absl::StatusOr<std::vector<bool>> wanted = SelectOutputs((*model)->model(), request);
  if (!wanted.ok()) return fail(wanted.status());
  // The protocol keeps its request until `done` returns, so the tensors view
  // its bytes without a keep-alive.
  absl::StatusOr<std::vector<Tensor>> inputs =
      BindInputs((*model)->model(), request.inputs, (*model)->max_batch_size, nullptr);
  if (!inputs.ok()) return fail(inputs.status());

  if ((*model)->scheduler == nullptr) {
    return fail(absl::InternalError(
        absl::StrCat("model '", (*model)->name, "' was loaded without a scheduler")));
  }

  auto call = std::make_shared<InferCall>();
  call->writer = writer;
  call->model = *model;
  call->wanted = *std::move(wanted);
  auto scheduled = std::make_unique<ScheduledRequest>();
  scheduled->inputs = *std::move(inputs);
  scheduled->context = std::move(context);
  scheduled->context.server_stopped = &stopped_;
  scheduled->sink = call.get();
  // A request padded to a sequence bucket shares plans and batches with
  // others of that bucket; its answer is cut back to its own length.
  std::shared_ptr<SequenceBucketPadding> padding = SequenceBucketPadding::For(
      (*model)->model(), scheduled->inputs, (*model)->scheduling.sequence_buckets, call.get());
  if (padding != nullptr) {
    scheduled->inputs = std::move(padding->inputs());
    scheduled->sink = padding.get();
  }
  const int64_t rows = scheduled->rows();
  const absl::Time bound = options_.clock->Now();
  // Copied only when the request log is on: an id may be long.
  std::string logged_id = VerboseLogOn(1) ? scheduled->context.id : std::string();
  scheduled->done = [this, call, padding, rows, admitted, bound, logged_id = std::move(logged_id),
                     done = std::move(done), in_flight = *std::move(in_flight)](
                        absl::Status status, ScheduleReport report) mutable {
    if (status.ok() && padding != nullptr) padding->CutOutputs();
    const absl::Time now = options_.clock->Now();
    LoadedModel& model = *call->model;
    if (VerboseLogOn(1)) {
      LogAnswered(logged_id, model.name, model.version, rows, status, report.queue, now - admitted);
    }
    if (status.ok()) {
      RequestTimes times;
      times.queue = report.queue;
      times.compute_input = (bound - admitted) + report.gather;
      times.compute_infer = report.infer;
      times.compute_output = report.scatter;
      model.statistics->RecordSuccess(rows, times);
      // The batch's first request counts the execution, once per batch.
      if (report.first_row == 0) model.statistics->RecordExecution(report.batch_rows, times);
      if (options_.observer != nullptr) options_.observer->OnInferred(model, rows, times);
    } else {
      model.statistics->RecordFailure(now - admitted);
    }
    InferAnswer answer{call->model, report.servable != nullptr
                                        ? Reports(*report.servable, report.slices)
                                        : std::vector<SliceReport>{}};
    std::move(done)(std::move(status), std::move(answer));
  };
  (*model)->scheduler->Submit(std::move(scheduled));
}

void ServingCore::TrainStep(TrainRequest request, RequestContext context, TrainDone done) {
  // Counted in flight from here, so a drain waits for the binding too.
  std::optional<InFlight> in_flight = Admit();
  if (!in_flight) {
    std::move(done)(ShuttingDown(), nullptr);
    return;
  }
  std::shared_ptr<LoadedModel> model;
  absl::StatusOr<BoundTrainStep> step = BindTrainStep(request, nullptr, &model);
  if (!step.ok()) return std::move(done)(step.status(), std::move(model));
  TrainBound(*std::move(step), std::move(context), std::move(done));
}

absl::StatusOr<BoundTrainStep> ServingCore::BindTrainStep(const TrainRequest& request,
                                                          std::shared_ptr<const void> keep_alive,
                                                          std::shared_ptr<LoadedModel>* found) {
  REPLICAD_ASSIGN_OR_RETURN(*found, FindModel(request.model, request.version, request.model_field));
  const LoadedModel& model = **found;
  auto fail = [&](const absl::Status& status) {
    if (options_.observer != nullptr) options_.observer->OnTrainStepRefused(model, status);
    return status;
  };
  if (model.training == nullptr) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' cannot be trained by this server")));
  }
  BoundTrainStep step;
  step.model = *found;
  absl::StatusOr<std::vector<Tensor>> inputs =
      BindInputs(model.model(), request.inputs, model.max_batch_size, keep_alive);
  if (!inputs.ok()) return fail(inputs.status());
  step.inputs = *std::move(inputs);
  if (!request.targets) return fail(absl::InvalidArgumentError("targets: missing"));
  absl::StatusOr<Tensor> targets =
      BindTargets(*request.targets, step.inputs[0].shape()[0], std::move(keep_alive));
  if (!targets.ok()) return fail(targets.status());
  step.targets = *std::move(targets);
  if (model.scheduler == nullptr) {
    return fail(absl::InternalError(
        absl::StrCat("model '", model.name, "' was loaded without a scheduler")));
  }
  step.shard = request.shard;
  return step;
}

void ServingCore::ExpectTrainStep(const BoundTrainStep& step) {
  step.model->training->ExpectStep(step.inputs, step.targets);
}

void ServingCore::WithdrawTrainStep(const BoundTrainStep& step) {
  step.model->training->WithdrawExpectedStep(step.inputs, step.targets);
}

void ServingCore::TrainBound(BoundTrainStep bound, RequestContext context, TrainDone done) {
  std::optional<InFlight> in_flight = Admit();
  if (!in_flight) {
    std::move(done)(ShuttingDown(), std::move(bound.model));
    return;
  }
  std::shared_ptr<LoadedModel> model = std::move(bound.model);
  // The step queues with the model's predictions: it runs once the batches
  // before it have finished, and those behind it wait for it.
  auto step = std::make_unique<ScheduledRequest>();
  step->inputs = std::move(bound.inputs);
  step->targets = std::move(bound.targets);
  step->shard = bound.shard;
  step->context = std::move(context);
  // A queued step is dropped once the server stops; one running finishes its
  // step (a step is never stopped half applied).
  step->context.server_stopped = &stopped_;
  Scheduler& scheduler = *model->scheduler;
  step->done = [this, model = std::move(model), done = std::move(done),
                in_flight = *std::move(in_flight)](absl::Status status,
                                                   ScheduleReport report) mutable {
    if (!status.ok()) {
      if (options_.observer != nullptr) options_.observer->OnTrainStepRefused(*model, status);
      return std::move(done)(std::move(status), std::move(model));
    }
    if (!report.step) {
      return std::move(done)(absl::InternalError("the training step ran but gave no result"),
                             std::move(model));
    }
    if (options_.observer != nullptr)
      options_.observer->OnTrainStep(*model, *report.step, report.queue);
    std::move(done)(*std::move(report.step), std::move(model));
  };
  scheduler.Submit(std::move(step));
}

absl::StatusOr<TrainingSession*> ServingCore::TrainingOf(
    bool admitted, const std::string& name, std::shared_ptr<LoadedModel>* model) const {
  if (!admitted) {
    return ShuttingDown();
  }
  absl::StatusOr<std::shared_ptr<LoadedModel>> found = FindModel(name, 0);
  if (!found.ok()) return found.status();
  *model = *std::move(found);
  if ((*model)->training == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", (*model)->name, "' cannot be trained by this server"));
  }
  return (*model)->training.get();
}

void ServingCore::ConfigureTraining(const std::string& model, TrainingConfig config,
                                    ConfigureDone done) {
  std::optional<InFlight> in_flight = Admit();
  std::shared_ptr<LoadedModel> found;
  absl::StatusOr<TrainingSession*> training = TrainingOf(in_flight.has_value(), model, &found);
  if (!training.ok()) return std::move(done)(training.status(), 0, std::move(found));
  (*training)->Configure(std::move(config),
                         [found, done = std::move(done), in_flight = *std::move(in_flight)](
                             absl::StatusOr<TrainingConfig> applied, int64_t step) mutable {
                           std::move(done)(std::move(applied), step, std::move(found));
                         });
}

void ServingCore::SaveCheckpoint(const std::string& model, std::string path, SaveDone done) {
  std::optional<InFlight> in_flight = Admit();
  std::shared_ptr<LoadedModel> found;
  absl::StatusOr<TrainingSession*> training = TrainingOf(in_flight.has_value(), model, &found);
  if (!training.ok()) return std::move(done)(training.status(), std::move(found));
  (*training)->SaveCheckpoint(std::move(path),
                              [found, done = std::move(done), in_flight = *std::move(in_flight)](
                                  absl::StatusOr<TrainingSession::Saved> saved) mutable {
                                std::move(done)(std::move(saved), std::move(found));
                              });
}

void ServingCore::ExportModel(const std::string& model, ExportDone done) {
  std::optional<InFlight> in_flight = Admit();
  std::shared_ptr<LoadedModel> found;
  absl::StatusOr<TrainingSession*> training = TrainingOf(in_flight.has_value(), model, &found);
  if (!training.ok()) return std::move(done)(training.status(), std::move(found));
  (*training)->Export([found, done = std::move(done), in_flight = *std::move(in_flight)](
                          absl::StatusOr<TrainingSession::Exported> exported) mutable {
    std::move(done)(std::move(exported), std::move(found));
  });
}

namespace {

absl::Status NotExplicit(const std::string& name) {
  return absl::FailedPreconditionError(
      absl::StrCat("model '", name,
                   "': loading and unloading models needs --model-control-mode explicit; "
                   "this server's models are fixed or follow its repository"));
}

}  // namespace

void ServingCore::LoadModel(std::string name, LoadDone done) {
  if (!options_.explicit_model_control) return std::move(done)(NotExplicit(name));
  control_.Submit([this, name = std::move(name), done = std::move(done)]() mutable {
    std::move(done)(models_.Load(name));
  });
}

void ServingCore::UnloadModel(std::string name, LoadDone done) {
  if (!options_.explicit_model_control) return std::move(done)(NotExplicit(name));
  control_.Submit([this, name = std::move(name), done = std::move(done)]() mutable {
    std::move(done)(models_.Unload(name));
  });
}

}  // namespace replicad
