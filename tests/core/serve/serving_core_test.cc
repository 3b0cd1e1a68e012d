// The serving core with fake servables and a fake repository: no devices,
// no daemon. What a protocol front door relies on: lookup, validation,
// output selection, dispatch off the caller's thread, deadlines,
// draining, readiness, statistics, and loads that never show a half-loaded
// model.
//
// In particular: work runs off the caller's thread; unknown models, versions and outputs name the
// protocol's field; expired or cancelled requests do not run; draining refuses new requests and
// waits for those in flight; readiness follows slot health; a reload while a request runs lets it
// finish on the old version (freed afterwards, off the slot thread) and sends new ones to the new;
// a failed reload keeps the old version serving; poll loads new and changed models, unloads removed
// ones and retries a broken one only when its files change; Predict uses the weights training
// published.
#include "core/serve/serving_core.h"

#include <atomic>
#include <map>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/base/worker_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// x float32[N,4] -> mean (rank 0), y [N,4]. The fake writes y = x * scale and
// mean = scale, so a test can tell which servable answered.
class FakeServable : public Servable {
 public:
  FakeServable(std::shared_ptr<const Model> model, float scale)
      : model_(std::move(model)), scale_(scale) {}

  const Model& model() const override { return *model_; }
  std::vector<SlotStatus> Slots() const override {
    return {SlotStatus{"r0", "cpu:0", 1.0,
                       healthy_ ? absl::OkStatus() : absl::InternalError("device lost")}};
  }
  std::string MergeDevice() const override { return "cpu:0"; }

  // On a slot thread of its own, as a ReplicaSet's slices run: Run must not
  // block its caller (the scheduler starts batches on protocol threads).
  void Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
           StillWanted still_wanted, Done done) override {
    slot_.Submit([this, inputs = std::move(inputs), slices = std::move(slices), sink,
                  still_wanted = std::move(still_wanted), done = std::move(done)]() mutable {
      predict_thread = std::this_thread::get_id();
      if (still_wanted != nullptr) {
        if (absl::Status wanted = still_wanted(); !wanted.ok()) return std::move(done)(wanted, {});
      }
      ++calls;
      if (gate != nullptr) gate->WaitForNotification();
      const int64_t rows = inputs[0].shape()[0];
      absl::StatusOr<void*> mean = sink->Allocate(0, TensorType{DType::kFloat32, {}});
      absl::StatusOr<void*> y = sink->Allocate(1, TensorType{DType::kFloat32, {rows, 4}});
      if (!mean.ok() || !y.ok()) return std::move(done)(absl::InternalError("sink"), {});
      *static_cast<float*>(*mean) = scale_;
      const float* x = static_cast<const float*>(inputs[0].raw_data());
      for (int64_t i = 0; i < rows * 4; ++i) static_cast<float*>(*y)[i] = x[i] * scale_;
      std::move(done)(absl::OkStatus(), std::move(slices));
    });
  }

  std::atomic<bool> healthy_{true};
  std::atomic<int> calls{0};
  std::thread::id predict_thread;
  absl::Notification* gate = nullptr;  // When set, Predict waits for it.

 private:
  std::shared_ptr<const Model> model_;
  float scale_;
  WorkerPool slot_{1};  // Last: its queued runs finish while the rest is there.
};

std::shared_ptr<const Model> MeanModel() {
  static const std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::ScalarMeanOnnx(), "mean");
  return model;
}

// Versions by name, each a servable with its own scale. Tests change it
// between loads as a repository's files would change.
class FakeRepository : public ModelRepository {
 public:
  struct Version {
    int64_t number;
    std::shared_ptr<FakeServable> servable;
  };

  absl::StatusOr<std::vector<Entry>> List() const override {
    absl::MutexLock lock(&mu_);
    std::vector<Entry> entries;
    for (const auto& [name, model] : models_) entries.push_back({name, model.fingerprint});
    return entries;
  }
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> Load(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    ++loading_;
    max_loading_ = std::max(max_loading_, loading_);
    // Held loads wait here, as a long load would.
    mu_.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &held_));
    --loading_;
    auto it = models_.find(name);
    if (it == models_.end()) return absl::NotFoundError("no model '" + name + "'");
    if (!it->second.error.ok()) return it->second.error;
    std::vector<std::shared_ptr<LoadedModel>> loaded;
    for (const Version& v : it->second.versions) {
      auto model = std::make_shared<LoadedModel>();
      model->name = name;
      model->version = v.number;
      model->servable = v.servable;
      model->max_batch_size = 8;
      model->scheduling.max_batch_size = 8;
      if (absl::Status s = StartScheduling(*model, nullptr, /*warm=*/false); !s.ok()) return s;
      loaded.push_back(std::move(model));
    }
    return loaded;
  }

  std::shared_ptr<FakeServable> Set(const std::string& name, std::vector<int64_t> versions,
                                    float scale, std::string fingerprint = "1") {
    absl::MutexLock lock(&mu_);
    auto servable = std::make_shared<FakeServable>(MeanModel(), scale);
    ModelFiles& files = models_[name];
    files.versions.clear();
    for (int64_t v : versions) files.versions.push_back({v, servable});
    files.fingerprint = std::move(fingerprint);
    files.error = absl::OkStatus();
    return servable;
  }
  void Break(const std::string& name, std::string fingerprint) {
    absl::MutexLock lock(&mu_);
    models_[name].error = absl::InvalidArgumentError("model '" + name + "': bad ONNX");
    models_[name].fingerprint = std::move(fingerprint);
  }
  void Remove(const std::string& name) {
    absl::MutexLock lock(&mu_);
    models_.erase(name);
  }
  // Loads wait while held.
  void HoldLoads(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }
  // Whether `count` loads came to wait at the same time within `timeout`.
  bool AwaitLoading(int count, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    std::pair<int*, int> wanted(&loading_, count);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::pair<int*, int>* c) { return *c->first >= c->second; }, &wanted),
        timeout);
  }
  int max_loading() const {
    absl::MutexLock lock(&mu_);
    return max_loading_;
  }

 private:
  struct ModelFiles {
    std::vector<Version> versions;
    std::string fingerprint;
    absl::Status error;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, ModelFiles> models_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int loading_ ABSL_GUARDED_BY(mu_) = 0;
  int max_loading_ ABSL_GUARDED_BY(mu_) = 0;
};

// Collects the outputs a request asked for.
class Outputs : public ResponseWriter {
 public:
  absl::StatusOr<void*> AddOutput(const TensorSpec& spec, const TensorType& type) override {
    names.push_back(spec.name);
    std::vector<float>& data = values[spec.name];
    data.resize(NumElements(type.shape));
    return data.data();
  }
  std::vector<std::string> names;
  std::map<std::string, std::vector<float>> values;
};

struct Answer {
  absl::Status status;
  std::shared_ptr<LoadedModel> model;
  std::vector<SliceReport> slices;
};

class ServingCoreTest : public ::testing::Test {
 protected:
  ServingCoreTest() {
    auto repository = std::make_unique<FakeRepository>();
    repository_ = repository.get();
    v1_ = repository_->Set("mean", {1}, 2.0f);
    manager_ = std::make_unique<ModelManager>(std::move(repository), retirer_);
    EXPECT_TRUE(manager_->LoadAll().ok());
    ServingCore::Options options;
    options.explicit_model_control = true;
    core_ = std::make_unique<ServingCore>(*manager_, options);
  }

  InferRequest Request(int64_t rows = 2, int64_t version = 0) {
    x_.assign(static_cast<size_t>(rows * 4), 1.5f);
    InferRequest request;
    request.model = "mean";
    request.version = version;
    request.model_field = "model_name";
    request.outputs_field = "outputs";
    request.inputs.push_back(
        RequestInput{"x", DType::kFloat32, {rows, 4}, x_.data(), x_.size() * sizeof(float)});
    return request;
  }

  // Starts Infer; the returned notification fires when it is answered.
  std::shared_ptr<absl::Notification> Start(InferRequest request, Outputs* outputs, Answer* answer,
                                            RequestContext context = {}) {
    auto done = std::make_shared<absl::Notification>();
    core_->Infer(std::move(request), std::move(context), outputs,
                 [answer, done](absl::Status status, ServingCore::InferAnswer a) {
                   *answer = Answer{std::move(status), std::move(a.model), std::move(a.slices)};
                   done->Notify();
                 });
    return done;
  }
  Answer Run(InferRequest request, Outputs* outputs, RequestContext context = {}) {
    Answer answer;
    Start(std::move(request), outputs, &answer, std::move(context))->WaitForNotification();
    return answer;
  }

  std::vector<float> x_;
  Retirer retirer_;
  FakeRepository* repository_;
  std::shared_ptr<FakeServable> v1_;
  std::unique_ptr<ModelManager> manager_;
  std::unique_ptr<ServingCore> core_;
};

TEST_F(ServingCoreTest, RunsOffTheCallersThreadAndCountsStatistics) {
  Outputs outputs;
  Answer answer = Run(Request(3), &outputs);
  ASSERT_TRUE(answer.status.ok()) << answer.status;
  EXPECT_NE(v1_->predict_thread, std::this_thread::get_id());
  EXPECT_THAT(outputs.names, ElementsAre("mean", "y"));
  EXPECT_EQ(outputs.values["y"], std::vector<float>(12, 3.0f));
  ASSERT_EQ(answer.slices.size(), 1u);
  EXPECT_EQ(answer.slices[0].slot, "r0");
  EXPECT_EQ(answer.slices[0].end, 3);
  const ModelStatisticsSnapshot stats = answer.model->statistics->Snapshot();
  EXPECT_EQ(stats.inference_count, 3u);
  EXPECT_EQ(stats.execution_count, 1u);
  EXPECT_EQ(stats.success.count, 1u);
  EXPECT_EQ(stats.fail.count, 0u);
  EXPECT_EQ(stats.batches.count(3), 1u);
  EXPECT_GT(stats.last_inference_ms, 0);
}

TEST_F(ServingCoreTest, UnknownModelAndVersionNameTheField) {
  Outputs outputs;
  InferRequest request = Request();
  request.model = "nope";
  Answer answer = Run(std::move(request), &outputs);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(answer.status.message(),
              HasSubstr("model_name: 'nope' is not served; served models: mean"));
  answer = Run(Request(2, 7), &outputs);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(answer.status.message(), HasSubstr("'mean' has no version 7; ready versions: 1"));
  EXPECT_EQ(v1_->calls, 0);
}

TEST_F(ServingCoreTest, SelectsOutputsAndRejectsUnknownOnes) {
  Outputs outputs;
  InferRequest request = Request();
  request.outputs = {"y"};
  ASSERT_TRUE(Run(std::move(request), &outputs).status.ok());
  EXPECT_THAT(outputs.names, ElementsAre("y"));

  Outputs rejected;
  request = Request();
  request.outputs = {"y", "z"};
  Answer answer = Run(std::move(request), &rejected);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status.message(),
              HasSubstr("outputs[1]: model 'mean' has no output 'z'; expected one of: mean, y"));
  EXPECT_EQ(answer.model->statistics->Snapshot().fail.count, 1u);

  Outputs twice;
  request = Request();
  request.outputs = {"y", "mean", "y"};
  answer = Run(std::move(request), &twice);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status.message(),
              HasSubstr("outputs[2]: output 'y' is asked for more than once"));
}

TEST_F(ServingCoreTest, BadInputsAreInvalidArgumentAndRunNothing) {
  Outputs outputs;
  InferRequest request = Request();
  request.inputs[0].dtype = DType::kInt64;
  Answer answer = Run(std::move(request), &outputs);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status.message(), HasSubstr("dtype expected float32, received int64"));
  answer = Run(Request(9), &outputs);  // max_batch_size is 8.
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status.message(), HasSubstr("batch size 9 exceeds the maximum of 8"));
  EXPECT_EQ(v1_->calls, 0);
}

TEST_F(ServingCoreTest, ExpiredOrCancelledRequestsDoNotRun) {
  Outputs outputs;
  RequestContext expired;
  expired.deadline = absl::Now() - absl::Milliseconds(1);
  Answer answer = Run(Request(), &outputs, expired);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(answer.status.message(), HasSubstr("while queued"));
  RequestContext cancelled;
  cancelled.cancelled = [] { return true; };
  answer = Run(Request(), &outputs, cancelled);
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(v1_->calls, 0);
}

// A request's in-flight guard is released on the scheduler's thread after its answer, so
// the core must not go away under it (TSan saw the guard lock a freed core's mutex).
TEST_F(ServingCoreTest, DestructionWaitsForRequestsInFlight) {
  absl::Notification gate;
  v1_->gate = &gate;
  Outputs outputs;
  Answer answer;
  std::shared_ptr<absl::Notification> done = Start(Request(), &outputs, &answer);
  while (v1_->calls == 0) absl::SleepFor(absl::Milliseconds(1));
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    core_.reset();
    destroyed = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(destroyed);
  gate.Notify();
  destroyer.join();
  EXPECT_TRUE(done->HasBeenNotified());
  EXPECT_TRUE(answer.status.ok()) << answer.status;
}

TEST_F(ServingCoreTest, DrainingRefusesNewRequestsAndWaitsForThoseInFlight) {
  absl::Notification gate;
  v1_->gate = &gate;
  Outputs outputs;
  Answer first;
  std::shared_ptr<absl::Notification> done = Start(Request(), &outputs, &first);
  while (v1_->calls == 0) absl::SleepFor(absl::Milliseconds(1));
  core_->StartDraining();
  EXPECT_FALSE(core_->ServerReady());
  EXPECT_EQ(core_->ModelReady("mean", 0).code(), absl::StatusCode::kUnavailable);
  Outputs refused_outputs;
  Answer refused = Run(Request(), &refused_outputs);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(core_->AwaitIdle(absl::Milliseconds(50)));
  gate.Notify();
  done->WaitForNotification();
  EXPECT_TRUE(first.status.ok());
  EXPECT_TRUE(core_->AwaitIdle(absl::Seconds(5)));
}

// Past a shutdown's grace period: new requests are refused, and those
// admitted learn from their context that nothing is wanted any more, so a
// queued one is answered UNAVAILABLE without running. (The fake runs its
// batch whole; real slots stop between kernels: scheduler_test.)
TEST_F(ServingCoreTest, StopInFlightAnswersEveryAdmittedRequestUnavailable) {
  absl::Notification gate;
  v1_->gate = &gate;
  Outputs outputs, queued_outputs;
  Answer first, queued;
  std::shared_ptr<absl::Notification> first_done = Start(Request(), &outputs, &first);
  while (v1_->calls == 0) absl::SleepFor(absl::Milliseconds(1));
  std::shared_ptr<absl::Notification> queued_done = Start(Request(), &queued_outputs, &queued);
  core_->StopInFlight();
  Outputs refused_outputs;
  EXPECT_EQ(Run(Request(), &refused_outputs).status.code(), absl::StatusCode::kUnavailable);
  gate.Notify();
  first_done->WaitForNotification();
  queued_done->WaitForNotification();
  EXPECT_EQ(queued.status.code(), absl::StatusCode::kUnavailable) << queued.status;
  EXPECT_THAT(queued.status.message(), HasSubstr("grace period is over"));
  EXPECT_EQ(v1_->calls, 1);
  EXPECT_TRUE(core_->AwaitIdle(absl::Seconds(5)));
}

TEST_F(ServingCoreTest, ReadinessFollowsSlotHealth) {
  EXPECT_TRUE(core_->ServerReady());
  EXPECT_TRUE(core_->ModelReady("mean", 1).ok());
  v1_->healthy_ = false;
  EXPECT_FALSE(core_->ServerReady());
  absl::Status model = core_->ModelReady("mean", 0);
  EXPECT_EQ(model.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(model.message(), HasSubstr("none of its slots can run it"));
  EXPECT_EQ(core_->ModelReady("other", 0).code(), absl::StatusCode::kNotFound);
}

// What a daemon that listens before its models load answers meanwhile:
// not ready, UNAVAILABLE naming the model as loading (NOT_FOUND only once
// the load is over), the models loading side by side, one broken model
// failing alone.
TEST_F(ServingCoreTest, WhileTheStartupModelsLoadNothingIsReadyAndTheyAnswerUnavailable) {
  auto repository = std::make_unique<FakeRepository>();
  FakeRepository& files = *repository;
  files.Set("mean", {1}, 2.0f);
  files.Set("second", {1}, 3.0f);
  files.Set("third", {2}, 4.0f);
  files.Break("broken", "1");
  ModelManager manager(std::move(repository), retirer_, /*load_threads=*/4);
  ServingCore::Options options;
  options.loading_startup_models = true;
  ServingCore core(manager, options);
  files.HoldLoads(true);
  absl::Status loaded;
  std::thread startup([&] { loaded = manager.LoadAll(); });
  // All four at once (one after another, the first would hold the rest).
  EXPECT_TRUE(files.AwaitLoading(4, absl::Seconds(10))) << "loads ran one at a time";

  EXPECT_FALSE(core.ServerReady());
  absl::Status ready = core.ModelReady("mean", 0);
  EXPECT_EQ(ready.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(ready.message(), HasSubstr("'mean' is loading"));
  absl::StatusOr<std::shared_ptr<LoadedModel>> found = core.FindModel("second", 0, "model_name");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(found.status().message(), HasSubstr("model_name: 'second' is loading"));
  // Not listed yet, as far as the daemon knows while it loads.
  EXPECT_EQ(core.FindModel("later", 0).status().code(), absl::StatusCode::kUnavailable);
  for (const ModelIndexEntry& entry : manager.Index()) {
    EXPECT_EQ(entry.state, ModelState::kLoading) << entry.name;
  }

  files.HoldLoads(false);
  startup.join();
  core.StartupModelsLoaded();
  EXPECT_EQ(files.max_loading(), 4);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.message(), HasSubstr("model 'broken': bad ONNX"));
  EXPECT_TRUE(core.ServerReady());
  for (const char* name : {"mean", "second", "third"}) {
    EXPECT_TRUE(core.ModelReady(name, 0).ok()) << name;
  }
  EXPECT_EQ(core.FindModel("later", 0).status().code(), absl::StatusCode::kNotFound);
  absl::Status broken = core.ModelReady("broken", 0);
  EXPECT_EQ(broken.code(), absl::StatusCode::kNotFound);
}

TEST_F(ServingCoreTest, VersionsAreServedByNumberAndLatestByDefault) {
  repository_->Set("mean", {1, 3}, 5.0f, "2");
  ASSERT_TRUE(manager_->Load("mean").ok());
  Outputs outputs;
  Answer latest = Run(Request(), &outputs);
  ASSERT_TRUE(latest.status.ok());
  EXPECT_EQ(latest.model->version, 3);
  Answer one = Run(Request(2, 1), &outputs);
  ASSERT_TRUE(one.status.ok());
  EXPECT_EQ(one.model->version, 1);
}

TEST_F(ServingCoreTest, ReloadWhileServingFinishesOldRequestsOnTheOldVersion) {
  absl::Notification gate;
  v1_->gate = &gate;
  Outputs old_outputs;
  Answer old_answer;
  std::shared_ptr<absl::Notification> old_done = Start(Request(), &old_outputs, &old_answer);
  while (v1_->calls == 0) absl::SleepFor(absl::Milliseconds(1));
  std::weak_ptr<FakeServable> old_servable = v1_;
  std::shared_ptr<FakeServable> v2 = repository_->Set("mean", {1}, 10.0f, "2");
  v1_.reset();
  // The reload runs on the core's control thread; nothing waits for it.
  absl::Notification loaded;
  core_->LoadModel("mean", [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    loaded.Notify();
  });
  loaded.WaitForNotification();
  Outputs new_outputs;
  Answer new_answer = Run(Request(), &new_outputs);
  ASSERT_TRUE(new_answer.status.ok());
  EXPECT_EQ(new_outputs.values["mean"], std::vector<float>{10.0f});
  EXPECT_FALSE(old_servable.expired());  // Still running a request.
  gate.Notify();
  old_done->WaitForNotification();
  ASSERT_TRUE(old_answer.status.ok());
  EXPECT_EQ(old_outputs.values["mean"], std::vector<float>{2.0f});
  old_answer.model.reset();
  // Freed by the retirer, off the slot thread, once nothing holds it.
  for (int i = 0; i < 500 && !old_servable.expired(); ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(old_servable.expired());
}

TEST_F(ServingCoreTest, AFailedReloadKeepsServingTheLoadedVersion) {
  repository_->Break("mean", "2");
  absl::Status s = manager_->Load("mean");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Outputs outputs;
  EXPECT_TRUE(Run(Request(), &outputs).status.ok());
  EXPECT_EQ(outputs.values["mean"], std::vector<float>{2.0f});
  std::vector<ModelIndexEntry> index = manager_->Index();
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(index[0].state, ModelState::kReady);
}

TEST_F(ServingCoreTest, UnloadStopsServingAndIndexSaysWhy) {
  absl::Notification unloaded;
  core_->UnloadModel("mean", [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    unloaded.Notify();
  });
  unloaded.WaitForNotification();
  Outputs outputs;
  EXPECT_EQ(Run(Request(), &outputs).status.code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(core_->ServerReady());
  std::vector<ModelIndexEntry> index = manager_->Index();
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(index[0].state, ModelState::kUnavailable);
  EXPECT_EQ(index[0].reason, "unloaded");
  EXPECT_EQ(manager_->Unload("mean").code(), absl::StatusCode::kNotFound);
}

TEST_F(ServingCoreTest, PollLoadsNewAndChangedModelsAndUnloadsRemovedOnes) {
  repository_->Set("other", {1}, 4.0f);
  ASSERT_TRUE(manager_->Poll().ok());
  EXPECT_TRUE(manager_->Find("other").ok());
  EXPECT_EQ(manager_->Find("mean").value()->servable, v1_);  // Unchanged: not reloaded.
  repository_->Set("mean", {2}, 6.0f, "changed");
  ASSERT_TRUE(manager_->Poll().ok());
  EXPECT_EQ(manager_->Find("mean").value()->version, 2);
  repository_->Remove("other");
  ASSERT_TRUE(manager_->Poll().ok());
  EXPECT_EQ(manager_->Find("other").status().code(), absl::StatusCode::kNotFound);
  // A model whose files fail to load is tried again only when they change.
  repository_->Break("mean", "broken");
  EXPECT_FALSE(manager_->Poll().ok());
  EXPECT_TRUE(manager_->Poll().ok());
  EXPECT_EQ(manager_->Find("mean").value()->version, 2);
}

TEST(ServingCoreControlTest, LoadingNeedsExplicitModelControl) {
  Retirer retirer;
  ModelManager manager(std::make_unique<FakeRepository>(), retirer);
  ServingCore core(manager, ServingCore::Options{});
  absl::Status status;
  core.LoadModel("mean", [&](absl::Status s) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("--model-control-mode explicit"));
  EXPECT_FALSE(core.ServerReady());  // No model loaded.
}

// A training side whose steps the test takes: each changes the step its
// weights are from.
class TrainedFake : public Trainable {
 public:
  void Step(std::vector<Tensor>, Tensor, std::optional<TrainShard>, StepDone done) override {
    std::move(done)(absl::UnimplementedError("not in this test"));
  }
  int64_t trained_step() const override { return step.load(); }
  void TrainedWeights(WeightsDone then) override {
    thread_.Submit([this, then = std::move(then)]() mutable {
      std::move(then)(Weights{MeanModel(), step.load()});
    });
  }
  std::atomic<int64_t> step{0};

 private:
  WorkerPool thread_{1};
};

TEST_F(ServingCoreTest, PredictUsesTheWeightsTrainingPublished) {
  auto loaded = std::make_shared<LoadedModel>(*manager_->Find("mean").value());
  auto training = std::make_shared<TrainedFake>();
  std::atomic<int> builds{0};
  std::shared_ptr<FakeServable> trained;
  loaded->published = std::make_shared<PublishedServable>(
      loaded->servable, training,
      [&](std::shared_ptr<const Model> model) -> absl::StatusOr<std::shared_ptr<Servable>> {
        ++builds;
        trained = std::make_shared<FakeServable>(std::move(model), 7.0f);
        return trained;
      },
      &retirer_);
  ASSERT_TRUE(StartScheduling(*loaded, nullptr, /*warm=*/false).ok());
  // Served through a repository that hands out this version.
  class One : public ModelRepository {
   public:
    explicit One(std::shared_ptr<LoadedModel> m) : m_(std::move(m)) {}
    absl::StatusOr<std::vector<Entry>> List() const override {
      return std::vector<Entry>{{"mean", ""}};
    }
    absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> Load(const std::string&) override {
      return std::vector<std::shared_ptr<LoadedModel>>{m_};
    }
    std::shared_ptr<LoadedModel> m_;
  };
  ModelManager manager(std::make_unique<One>(loaded), retirer_);
  ASSERT_TRUE(manager.LoadAll().ok());
  ServingCore core(manager, ServingCore::Options{});
  auto predict = [&]() {
    Outputs outputs;
    absl::Notification done;
    absl::Status status;
    core.Infer(Request(), {}, &outputs, [&](absl::Status s, ServingCore::InferAnswer) {
      status = s;
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_TRUE(status.ok()) << status;
    return outputs.values["mean"];
  };
  const std::vector<float> as_loaded = predict();
  EXPECT_NE(as_loaded, std::vector<float>{7.0f});
  EXPECT_EQ(builds.load(), 0);  // No step yet: the loaded servable, nothing built.
  training->step = 1;
  EXPECT_EQ(predict(), std::vector<float>{7.0f});
  EXPECT_EQ(predict(), std::vector<float>{7.0f});
  EXPECT_EQ(builds.load(), 1);  // Built once for step 1, then reused.
  EXPECT_EQ(trained->calls, 2);
  training->step = 2;
  EXPECT_EQ(predict(), std::vector<float>{7.0f});
  EXPECT_EQ(builds.load(), 2);
}

}  // namespace
}  // namespace replicad
