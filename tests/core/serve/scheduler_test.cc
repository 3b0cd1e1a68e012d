// The scheduler on real CPU replicas (exactness of fused batches) and on
// stand-in slots whose speed and blocking the tests control (queue policy,
// deadlines, cancellation, priorities, ordering, routing by measured speed).
//
// On real CPU replicas: fused batches of mixed request sizes of a two-input, two-output model equal
// each request run alone within 1e-6 relative; a model with a rank-0 output is never fused and each
// request's mean is its own; warm-up builds and measures every slot.
//
// On stand-in slots: an idle model's request goes to its slot from the submitting thread, and one
// that finds every slot busy is started by the loop once a slot frees; a deadline passing in the
// queue is answered at once and never runs; a cancelled request leaves the queue; a full queue and
// the bytes bound answer at once; priority levels, then arrival order; preserve_ordering; a
// request's timeout shortening the policy's only when allowed; DELAY behind those that did not time
// out; queued requests fused while the slot is busy; a preferred size ending a batch; small batches
// going whole to different free slots; two slots, one 3x slower: measured shares settle near 3:1
// and beat equal shares. A training step runs after the batches queued before it, alone, and before
// those queued after it.
#include "core/serve/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/base/worker_pool.h"
#include "core/model/onnx_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/device_memory_stand_in.h"
#include "tests/testing/manual_clock.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::shared_ptr<const Model> TwoInTwoOut() {
  static const std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::TwoInputTwoOutputOnnx(), "two");
  return model;
}

// One request's inputs, outputs and answer.
struct Call {
  std::vector<Tensor> inputs;
  testing::TensorSink outputs;
  absl::Notification answered;
  absl::Status status;
  ScheduleReport report;
  absl::Time answered_at;
};

std::unique_ptr<ScheduledRequest> RequestFor(Call& call, RequestContext context = {}) {
  auto request = std::make_unique<ScheduledRequest>();
  request->inputs = call.inputs;
  request->context = std::move(context);
  request->sink = &call.outputs;
  request->done = [&call](absl::Status status, ScheduleReport report) {
    call.status = std::move(status);
    call.report = std::move(report);
    call.answered_at = absl::Now();
    call.answered.Notify();
  };
  return request;
}

// Rows of the two-input model, row i of both inputs from seed + i.
std::vector<Tensor> TwoInputs(int64_t rows, uint64_t seed) {
  return {testing::RandomTensor({rows, 3, 6, 6}, seed), testing::RandomTensor({rows, 5}, seed + 1)};
}

// Call `i`'s two outputs equal its inputs run alone on `set`. Tolerance: the
// same kernels on the same rows; only a batch's blocking can change the
// order of float sums.
void ExpectAnswerAsAlone(ReplicaSet& set, const Call& call, size_t i) {
  testing::PredictOutcome alone = testing::PredictAndWait(set, call.inputs);
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  ASSERT_EQ(call.outputs.outputs.size(), 2u);
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(call.outputs.outputs[j].shape(), alone.outputs[j].shape());
    EXPECT_LT(testing::RelativeL2(call.outputs.outputs[j], alone.outputs[j]), 1e-6)
        << "request " << i << " output " << j;
  }
}

TEST(SchedulerExactnessTest, FusedBatchesOfMixedSizesMatchEachRequestAlone) {
  std::shared_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(TwoInTwoOut(), {1, 1});
  SchedulerOptions options;
  options.max_batch_size = 64;
  // Long enough that every request below is queued before the first batch
  // forms, so they are fused.
  options.max_queue_delay = absl::Milliseconds(200);
  Scheduler scheduler(
      Scheduler::Environment{"two", set, nullptr, options, nullptr, RealClock(), nullptr});
  const std::vector<int64_t> sizes = {1, 3, 5, 2, 7, 1, 4, 9, 1};
  std::vector<std::unique_ptr<Call>> calls;
  for (size_t i = 0; i < sizes.size(); ++i) {
    calls.push_back(std::make_unique<Call>());
    calls.back()->inputs = TwoInputs(sizes[i], 100 * i);
  }
  for (auto& call : calls) scheduler.Submit(RequestFor(*call));
  int fused = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    Call& call = *calls[i];
    call.answered.WaitForNotification();
    ASSERT_TRUE(call.status.ok()) << call.status;
    if (call.report.batch_requests > 1) ++fused;
    ExpectAnswerAsAlone(*set, call, i);
  }
  EXPECT_EQ(fused, static_cast<int>(sizes.size()));  // All in one batch.
}

// x [N, S, 4] -> Softmax over S -> ReduceSum over S (keepdims 0) -> y [N, 4]
// and z = the softmax [N, S, 4]: a model whose sequence length is dynamic.
std::shared_ptr<const Model> VariableLength() {
  static const std::shared_ptr<const Model> model = [] {
    OnnxModelBuilder b("sequences", 13);
    OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"x"}, {"z"}), "axis", 1);
    Tensor axes = Tensor::Host(DType::kInt64, {1});
    axes.data<int64_t>()[0] = 1;
    b.AddInitializer("axes", axes);
    OnnxModelBuilder::SetInt(b.AddNode("ReduceSum", {"z", "axes"}, {"y"}), "keepdims", 0);
    b.AddInput("x", DType::kFloat32, {kAnyDim, kAnyDim, 4});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
    b.AddOutput("z", DType::kFloat32, {kAnyDim, kAnyDim, 4});
    return testing::LoadOrDie(b.Serialize(), "sequences");
  }();
  return model;
}

// Requests of several sequence lengths queued together: only requests of
// one length share a batch (their rows are joined along dim 0), each gets
// its own answer, equal to it run alone, and a plan is made per length.
TEST(SchedulerExactnessTest, RequestsOfDifferentSequenceLengthsAreBatchedOnlyByLength) {
  std::shared_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(VariableLength(), {1, 1});
  SchedulerOptions options;
  options.max_batch_size = 64;
  options.max_queue_delay = absl::Milliseconds(200);
  Scheduler scheduler(
      Scheduler::Environment{"sequences", set, nullptr, options, nullptr, RealClock(), nullptr});
  const std::vector<std::pair<int64_t, int64_t>> rows_and_lengths = {
      {1, 3}, {2, 7}, {1, 3}, {3, 1}, {2, 7}, {1, 12}, {4, 3}};
  std::vector<std::unique_ptr<Call>> calls;
  for (size_t i = 0; i < rows_and_lengths.size(); ++i) {
    calls.push_back(std::make_unique<Call>());
    const auto [rows, length] = rows_and_lengths[i];
    calls.back()->inputs = {testing::RandomTensor({rows, length, 4}, 40 + i)};
  }
  for (auto& call : calls) scheduler.Submit(RequestFor(*call));
  for (size_t i = 0; i < calls.size(); ++i) {
    Call& call = *calls[i];
    call.answered.WaitForNotification();
    ASSERT_TRUE(call.status.ok()) << call.status;
    const int64_t length = rows_and_lengths[i].second;
    int same_length = 0;
    for (const auto& [rows, other] : rows_and_lengths) same_length += other == length;
    EXPECT_LE(call.report.batch_requests, same_length) << "request " << i;
    ExpectAnswerAsAlone(*set, call, i);
    EXPECT_EQ(call.outputs.outputs[1].shape()[1], length);
  }
}

// y = CumSum(x) along dim 0: each row's result depends on the rows before
// it, so requests must neither share a batch nor be split over slots (the
// hostile probe of issue #38 got other clients' sums back).
TEST(SchedulerExactnessTest, AModelThatMixesRowsRunsEachRequestAloneAndWhole) {
  OnnxModelBuilder b("running", 13);
  Tensor axis = Tensor::Host(DType::kInt64, {});
  axis.data<int64_t>()[0] = 0;
  b.AddInitializer("axis", axis);
  b.AddNode("CumSum", {"x", "axis"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  std::shared_ptr<const Model> model = testing::LoadOrDie(b.Serialize(), "running");
  ASSERT_THAT(model->row_mixing(), HasSubstr("CumSum"));
  std::shared_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model, {1, 1});
  SchedulerOptions options;
  options.max_batch_size = 64;
  options.max_queue_delay = absl::Milliseconds(100);
  Scheduler scheduler(
      Scheduler::Environment{"running", set, nullptr, options, nullptr, RealClock(), nullptr});
  std::vector<std::unique_ptr<Call>> calls;
  for (int64_t rows : {3, 1, 4, 2, 6}) {
    calls.push_back(std::make_unique<Call>());
    calls.back()->inputs = {testing::RandomTensor({rows, 2}, 70 + rows)};
  }
  for (auto& call : calls) scheduler.Submit(RequestFor(*call));
  for (auto& call : calls) {
    call->answered.WaitForNotification();
    ASSERT_TRUE(call->status.ok()) << call->status;
    EXPECT_EQ(call->report.batch_requests, 1);
    EXPECT_EQ(call->report.slices.size(), 1u);
    const Tensor& x = call->inputs[0];
    const Tensor& y = call->outputs.outputs[0];
    float sum[2] = {0, 0};
    for (int64_t r = 0; r < x.shape()[0]; ++r) {
      for (int c = 0; c < 2; ++c) {
        sum[c] += x.data<float>()[r * 2 + c];
        EXPECT_NEAR(y.data<float>()[r * 2 + c], sum[c], 1e-5) << "row " << r;
      }
    }
  }
}

TEST(SchedulerExactnessTest, ARankZeroOutputIsEachRequestsOwn) {
  std::shared_ptr<ReplicaSet> set =
      testing::MakeCpuReplicaSet(testing::LoadOrDie(testing::ScalarMeanOnnx(), "mean"), {1, 1});
  SchedulerOptions options;
  options.max_batch_size = 64;
  options.max_queue_delay = absl::Milliseconds(100);
  Scheduler scheduler(
      Scheduler::Environment{"mean", set, nullptr, options, nullptr, RealClock(), nullptr});
  std::vector<std::unique_ptr<Call>> calls;
  for (int64_t rows : {2, 5, 1, 3}) {
    calls.push_back(std::make_unique<Call>());
    // Positive values: a mean near zero would make any relative tolerance
    // meaningless, whatever the split.
    Tensor x = testing::RandomTensor({rows, 4}, 7 * rows);
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = 1.5f + x.data<float>()[i];
    calls.back()->inputs = {x};
  }
  for (auto& call : calls) scheduler.Submit(RequestFor(*call));
  for (auto& call : calls) {
    call->answered.WaitForNotification();
    ASSERT_TRUE(call->status.ok()) << call->status;
    EXPECT_EQ(call->report.batch_requests, 1);  // Never fused.
    testing::PredictOutcome alone = testing::PredictAndWait(*set, call->inputs);
    ASSERT_TRUE(alone.status.ok());
    // Tolerance: a mean of a few floats, summed in another order at most.
    EXPECT_LT(testing::RelativeL2(call->outputs.outputs[0], alone.outputs[0]), 1e-6);
    EXPECT_LT(testing::RelativeL2(call->outputs.outputs[1], alone.outputs[1]), 1e-6);
  }
}

// Fault injection: slot r0 (a stand-in GPU) loses its device in the middle
// of a slice, after its inputs went up and before its outputs came back. The
// batch runs again on r1 alone and answers what one slot computes; r0, now
// unhealthy, gets nothing more.
TEST(SchedulerFaultTest, ASlotThatFailsMidRequestLeavesTheSplitAndItsBatchRunsOnTheOthers) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  auto fault = std::make_shared<testing::InjectedFault>();
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int s = 0; s < 2; ++s) {
    std::unique_ptr<Device> device = testing::MakeDeviceMemoryStandIn(
        CreateCpuDevice(cpu, CpuSlotOptions{1}), s, 0, s == 0 ? fault : nullptr);
    const DeviceId id = device->info().id;
    absl::StatusOr<std::unique_ptr<Replica>> replica = Replica::Create(
        TwoInTwoOut(), SlotAssignment{"r" + std::to_string(s), id, 1.0}, std::move(device));
    ASSERT_TRUE(replica.ok()) << replica.status();
    replicas.push_back(*std::move(replica));
  }
  ReplicaSet::Options set_options;
  set_options.transfer_chunks = 1;
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
      ReplicaSet::Create(TwoInTwoOut(), std::move(replicas), set_options);
  ASSERT_TRUE(set.ok()) << set.status();
  SchedulerOptions options;
  options.dynamic_batching = false;
  Scheduler scheduler(Scheduler::Environment{"faulty", std::shared_ptr<Servable>(*std::move(set)),
                                             nullptr, options, nullptr, RealClock(), nullptr});
  std::shared_ptr<ReplicaSet> reference = testing::MakeCpuReplicaSet(TwoInTwoOut(), {1});
  // Two inputs go up, then the first output's copy down fails.
  fault->copies_before_failure = 2;
  for (int64_t rows : {12, 6}) {
    Call call;
    call.inputs = TwoInputs(rows, 7 * rows);
    scheduler.Submit(RequestFor(call));
    call.answered.WaitForNotification();
    ASSERT_TRUE(call.status.ok()) << call.status;
    EXPECT_TRUE(fault->failed.load());
    for (const BatchSlice& slice : call.report.slices) EXPECT_EQ(slice.slot, 1) << rows;
    testing::PredictOutcome alone = testing::PredictAndWait(*reference, call.inputs);
    ASSERT_TRUE(alone.status.ok()) << alone.status;
    ASSERT_EQ(call.outputs.outputs.size(), 2u);
    for (size_t j = 0; j < 2; ++j) {
      ASSERT_EQ(call.outputs.outputs[j].shape(), alone.outputs[j].shape()) << rows;
      // Tolerance: the same kernels on the same rows.
      EXPECT_LT(testing::RelativeL2(call.outputs.outputs[j], alone.outputs[j]), 1e-6)
          << rows << " rows, output " << j;
    }
  }
}

TEST(SchedulerWarmTest, WarmBuildsPlansAndMeasuresEverySlot) {
  std::shared_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(TwoInTwoOut(), {1, 1});
  SchedulerOptions options;
  options.max_batch_size = 16;
  options.preferred_batch_sizes = {6};
  Scheduler scheduler(
      Scheduler::Environment{"two", set, nullptr, options, nullptr, RealClock(), nullptr});
  ASSERT_TRUE(scheduler.Warm().ok());
  for (const Scheduler::SlotReport& slot : scheduler.Slots()) {
    EXPECT_TRUE(slot.measured) << slot.slot;
    EXPECT_GT(slot.rows_per_second, 0) << slot.slot;
  }
  // 1, 2 (warmup_max_rows) and 6 (preferred) rows on each slot; 16, the
  // model's largest, builds on first use.
  for (const auto& replica : set->replicas()) EXPECT_EQ(replica->plan_count(), 3u);
}

TEST(SchedulerWarmTest, WarmTakesTheConfiguredSizesAndNoneAboveMaxBatchSize) {
  std::shared_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(TwoInTwoOut(), {1});
  SchedulerOptions options;
  options.max_batch_size = 12;
  options.warmup_max_rows = 64;          // Powers of two up to 12: 1, 2, 4, 8.
  options.warmup_batch_sizes = {3, 12};  // model_warmup's.
  Scheduler scheduler(
      Scheduler::Environment{"two", set, nullptr, options, nullptr, RealClock(), nullptr});
  ASSERT_TRUE(scheduler.Warm().ok());
  EXPECT_EQ(set->replicas()[0]->plan_count(), 6u);

  options.warmup_max_rows = 1;  // Still 1 and 2: they tell whether outputs follow the batch.
  options.warmup_batch_sizes.clear();
  std::shared_ptr<ReplicaSet> small = testing::MakeCpuReplicaSet(TwoInTwoOut(), {1});
  Scheduler only_small(
      Scheduler::Environment{"two", small, nullptr, options, nullptr, RealClock(), nullptr});
  ASSERT_TRUE(only_small.Warm().ok());
  EXPECT_EQ(small->replicas()[0]->plan_count(), 2u);
}

// x float32[N,4] -> y = Relu(x): rows in, rows out, nothing of rank 0.
std::shared_ptr<const Model> ReluModel() {
  static const std::shared_ptr<const Model> model = [] {
    OnnxModelBuilder b("relu", 13);
    b.AddNode("Relu", {"x"}, {"y"});
    b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
    return testing::LoadOrDie(b.Serialize(), "relu");
  }();
  return model;
}

// Stand-in slots: each a thread of its own that takes `fixed + per_row *
// rows` seconds per slice and writes y = x * 2 (x float32[N,4] -> y [N,4]).
// A slice holding a row whose first value is kGateValue waits for `gate`.
constexpr float kGateValue = 99.0f;

class StandInSlots : public Servable {
 public:
  struct Speed {
    double fixed = 0, per_row = 0;
    // Larger slices do not fit the slot's memory: the Run fails
    // ResourceExhausted, as a GPU slot's does, before anything is allocated.
    int64_t max_rows = INT64_MAX;
  };
  explicit StandInSlots(std::vector<Speed> speeds) : speeds_(std::move(speeds)) {
    for (size_t i = 0; i < speeds_.size(); ++i) pools_.push_back(std::make_unique<WorkerPool>(1));
  }

  const Model& model() const override { return *model_; }
  std::vector<SlotStatus> Slots() const override {
    std::vector<SlotStatus> slots;
    for (size_t i = 0; i < speeds_.size(); ++i) {
      slots.push_back(SlotStatus{"r" + std::to_string(i), "cpu:0", 1.0, absl::OkStatus()});
    }
    return slots;
  }
  std::string MergeDevice() const override { return "cpu:0"; }
  // A slice marked widened runs as any other here, and keeps its mark.
  bool LendsIdleCores() const override { return lends; }

  void Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
           StillWanted still_wanted, Done done) override {
    {
      absl::MutexLock lock(&mu_);
      run_callers_.push_back(std::this_thread::get_id());
    }
    const int64_t rows = inputs[0].shape()[0];
    for (BatchSlice& slice : slices) {
      if (slice.rows() > speeds_[slice.slot].max_rows) {
        slice.out_of_memory = true;
        ++out_of_memory;
        return std::move(done)(absl::ResourceExhaustedError(absl::StrCat(
                                   "slot r", slice.slot, ": ", slice.rows(), " rows do not fit")),
                               std::move(slices));
      }
    }
    absl::StatusOr<void*> y = sink->Allocate(0, TensorType{DType::kFloat32, {rows, 4}});
    if (!y.ok()) return std::move(done)(y.status(), {});
    struct State {
      std::vector<Tensor> inputs;
      std::vector<BatchSlice> slices;
      std::atomic<int> left{0};
      absl::Mutex mu;
      absl::Status status;
      Done done;
    };
    auto state = std::make_shared<State>();
    state->inputs = std::move(inputs);
    state->slices = std::move(slices);
    const size_t count = state->slices.size();
    state->left = static_cast<int>(count);
    state->done = std::move(done);
    // Not state->slices.size() in the loop: the last slice to finish moves the slices out,
    // possibly before the loop checks its bound again.
    for (size_t s = 0; s < count; ++s) {
      pools_[state->slices[s].slot]->Submit(
          [this, state, s, out = static_cast<float*>(*y), still_wanted] {
            BatchSlice& slice = state->slices[s];
            absl::Status status = still_wanted != nullptr ? still_wanted() : absl::OkStatus();
            if (status.ok()) {
              ++running_slices;
              if (stepping.load()) overlapped = true;
              const float* x = static_cast<const float*>(state->inputs[0].raw_data());
              for (int64_t r = slice.begin; r < slice.end; ++r) {
                if (x[r * 4] == kGateValue) gate.WaitForNotification();
              }
              const auto start = std::chrono::steady_clock::now();
              const Speed& speed = speeds_[slice.slot];
              absl::SleepFor(absl::Seconds(speed.fixed + speed.per_row * slice.rows()));
              for (int64_t i = slice.begin * 4; i < slice.end * 4; ++i) out[i] = x[i] * 2;
              {
                absl::MutexLock lock(&mu_);
                for (int64_t r = slice.begin; r < slice.end; ++r) ran_.push_back(x[r * 4]);
              }
              slice.seconds =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
              --running_slices;
            }
            {
              absl::MutexLock lock(&state->mu);
              if (state->status.ok()) state->status = status;
            }
            if (state->left.fetch_sub(1) == 1) {
              std::move(state->done)(state->status, std::move(state->slices));
            }
          });
    }
  }

  // First values of the rows run so far, in the order they ran.
  std::vector<float> ran() const {
    absl::MutexLock lock(&mu_);
    return ran_;
  }
  // The threads that called Run, in order.
  std::vector<std::thread::id> run_callers() const {
    absl::MutexLock lock(&mu_);
    return run_callers_;
  }
  // Adds `value` to ran(), as a stand-in training step does.
  void Ran(float value) {
    absl::MutexLock lock(&mu_);
    ran_.push_back(value);
  }
  absl::Notification gate;
  // Slices running now; set by a stand-in training step while it runs, and
  // whether a slice ran meanwhile.
  std::atomic<int> running_slices{0};
  std::atomic<int> out_of_memory{0};  // Runs refused for a slice too large.
  std::atomic<bool> stepping{false}, overlapped{false};
  bool lends = false;  // Set before the scheduler starts.

 private:
  std::shared_ptr<const Model> model_ = ReluModel();
  std::vector<Speed> speeds_;
  std::vector<std::unique_ptr<WorkerPool>> pools_;
  mutable absl::Mutex mu_;
  std::vector<float> ran_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> run_callers_ ABSL_GUARDED_BY(mu_);
};

// x float32[rows, 4] with every value `value`.
std::vector<Tensor> Rows(int64_t rows, float value) {
  Tensor x = Tensor::Host(DType::kFloat32, {rows, 4});
  for (int64_t i = 0; i < rows * 4; ++i) x.data<float>()[i] = value;
  return {x};
}

// A stand-in training side on the stand-in slots' devices: a step takes 20
// ms on a thread of its own, notes its first input value (negated) in the
// slots' ran(), and reports the mean of its targets as its loss.
class StandInTrainer : public Trainable {
 public:
  explicit StandInTrainer(StandInSlots* slots) : slots_(slots) {}
  void Step(std::vector<Tensor> inputs, Tensor targets, std::optional<TrainShard>,
            StepDone done) override {
    thread_.Submit([this, inputs = std::move(inputs), targets = std::move(targets),
                    done = std::move(done)]() mutable {
      slots_->stepping = true;
      if (slots_->running_slices.load() > 0) slots_->overlapped = true;
      absl::SleepFor(absl::Milliseconds(20));
      slots_->Ran(-inputs[0].data<float>()[0]);
      DataParallelTrainer::StepResult result;
      const int64_t n = targets.shape()[0];
      for (int64_t i = 0; i < n; ++i) result.loss += targets.data<float>()[i] / n;
      result.samples = n;
      result.step = ++steps_;
      slots_->stepping = false;
      std::move(done)(std::move(result));
    });
  }
  int64_t trained_step() const override { return steps_.load(); }
  void TrainedWeights(WeightsDone then) override {
    std::move(then)(absl::UnimplementedError("the scheduler is not given a published servable"));
  }
  int steps() const { return steps_; }

 private:
  StandInSlots* slots_;
  std::atomic<int> steps_{0};
  WorkerPool thread_{1};
};

class StandInTest : public ::testing::Test {
 protected:
  void Start(std::vector<StandInSlots::Speed> speeds, SchedulerOptions options,
             bool trainable = false) {
    slots_ = std::make_shared<StandInSlots>(std::move(speeds));
    trainer_ = trainable ? std::make_shared<StandInTrainer>(slots_.get()) : nullptr;
    scheduler_ = std::make_unique<Scheduler>(Scheduler::Environment{
        "standin", slots_, trainer_, std::move(options), nullptr, clock_, nullptr});
  }
  ~StandInTest() override {
    Open();
    scheduler_.reset();
  }
  void Open() {
    if (slots_ != nullptr && !slots_->gate.HasBeenNotified()) slots_->gate.Notify();
  }
  Call& Submit(int64_t rows, float value, RequestContext context = {}) {
    calls_.push_back(std::make_unique<Call>());
    calls_.back()->inputs = Rows(rows, value);
    scheduler_->Submit(RequestFor(*calls_.back(), std::move(context)));
    return *calls_.back();
  }
  // Submits `count` requests that hold the one slot until the gate opens:
  // the scheduler gives a slot one fused batch at a time, or two unfused
  // ones (one running, one waiting on its stream).
  void Block(int count) {
    for (int i = 0; i < count; ++i) Submit(1, kGateValue);
    while (scheduler_->pending() > 0) absl::SleepFor(absl::Milliseconds(1));
  }

  // A training step on `rows` rows of `value`, targets all `target`.
  Call& SubmitStep(int64_t rows, float value, float target, RequestContext context = {}) {
    calls_.push_back(std::make_unique<Call>());
    calls_.back()->inputs = Rows(rows, value);
    std::unique_ptr<ScheduledRequest> step = RequestFor(*calls_.back(), std::move(context));
    Tensor targets = Tensor::Host(DType::kFloat32, {rows});
    for (int64_t i = 0; i < rows; ++i) targets.data<float>()[i] = target;
    step->targets = std::move(targets);
    step->sink = nullptr;
    scheduler_->Submit(std::move(step));
    return *calls_.back();
  }

  // Tests of timeouts, delays and deadlines set clock_ = &manual_clock_
  // before Start and advance it instead of sleeping.
  ManualClock manual_clock_;
  const Clock* clock_ = RealClock();
  std::shared_ptr<StandInSlots> slots_;
  std::shared_ptr<StandInTrainer> trainer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Call>> calls_;
};

SchedulerOptions Unbatched() {
  SchedulerOptions options;
  options.dynamic_batching = false;
  return options;
}

// A request that finds the model idle goes to its slot from the thread that
// submitted it (no hand-off to the scheduler's thread); one that finds every
// slot busy waits in the queue, and the loop, woken when a slot frees,
// starts it.
TEST_F(StandInTest, AnIdleModelStartsARequestFromTheSubmittingThread) {
  Start({{}}, Unbatched());
  Submit(1, 1.0f).answered.WaitForNotification();
  EXPECT_THAT(slots_->run_callers(), ElementsAre(std::this_thread::get_id()));
  Block(2);  // One running on the slot, one waiting on its stream.
  Call& queued = Submit(1, 5.0f);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(scheduler_->pending(), 1u);
  EXPECT_FALSE(queued.answered.HasBeenNotified());
  Open();
  queued.answered.WaitForNotification();
  EXPECT_TRUE(queued.status.ok()) << queued.status;
  const std::vector<std::thread::id> callers = slots_->run_callers();
  ASSERT_EQ(callers.size(), 4u);
  EXPECT_EQ(callers[1], std::this_thread::get_id());
  EXPECT_NE(callers[3], std::this_thread::get_id());
  EXPECT_THAT(slots_->ran(), ElementsAre(1.0f, kGateValue, kGateValue, 5.0f));
}

TEST_F(StandInTest, ADeadlinePassingInTheQueueIsAnsweredAtOnceAndNeverRuns) {
  clock_ = &manual_clock_;
  Start({{}}, Unbatched());
  Block(2);
  RequestContext context;
  context.deadline = manual_clock_.Now() + absl::Milliseconds(30);
  Call& late = Submit(1, 5.0f, context);
  manual_clock_.Advance(absl::Milliseconds(31));
  late.answered.WaitForNotification();  // While the slot is still blocked.
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.status.message(), HasSubstr("while queued"));
  Open();
  Call& after = Submit(1, 6.0f);
  after.answered.WaitForNotification();
  EXPECT_THAT(slots_->ran(), ElementsAre(kGateValue, kGateValue, 6.0f));
}

TEST_F(StandInTest, ACancelledRequestLeavesTheQueue) {
  Start({{}}, Unbatched());
  Block(2);
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  RequestContext context;
  context.cancelled = [cancelled] { return cancelled->load(); };
  Call& gone = Submit(1, 5.0f, context);
  cancelled->store(true);
  gone.answered.WaitForNotification();
  EXPECT_EQ(gone.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(scheduler_->pending(), 0u);
  Open();
  Submit(1, 6.0f).answered.WaitForNotification();
  EXPECT_THAT(slots_->ran(), ElementsAre(kGateValue, kGateValue, 6.0f));
}

TEST_F(StandInTest, AFullQueueAnswersUnavailableAtOnce) {
  SchedulerOptions options = Unbatched();
  options.default_queue_policy.max_queue_size = 2;
  Start({{}}, options);
  Block(2);
  Call& a = Submit(1, 1.0f);
  Call& b = Submit(1, 2.0f);
  Call& refused = Submit(1, 3.0f);
  ASSERT_TRUE(refused.answered.HasBeenNotified());  // Before Submit returned.
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status.message(), HasSubstr("at most 2 requests (max_queue_size)"));
  Open();
  a.answered.WaitForNotification();
  b.answered.WaitForNotification();
  EXPECT_TRUE(a.status.ok() && b.status.ok());
}

TEST_F(StandInTest, QueuedBytesAreBounded) {
  SchedulerOptions options = Unbatched();
  options.max_queue_bytes = 120;  // A 1-row request holds 16 bytes.
  Start({{}}, options);
  Block(2);                     // 32 bytes running.
  Call& big = Submit(5, 1.0f);  // 32 + 80 bytes: fits.
  Call& refused = Submit(1, 2.0f);
  ASSERT_TRUE(refused.answered.HasBeenNotified());
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status.message(), HasSubstr("bound of 120 (--max-queue-bytes)"));
  Open();
  big.answered.WaitForNotification();
  Submit(1, 3.0f).answered.WaitForNotification();  // Room again once run.
  EXPECT_TRUE(calls_.back()->status.ok()) << calls_.back()->status;
}

TEST_F(StandInTest, HigherPriorityLevelsRunFirstThenArrivalOrder) {
  SchedulerOptions options = Unbatched();
  options.priority_levels = 3;
  options.default_priority_level = 2;
  Start({{}}, options);
  Block(2);
  auto with = [](uint64_t priority) {
    RequestContext context;
    context.priority = priority;
    return context;
  };
  Submit(1, 1.0f, with(3));
  Submit(1, 2.0f, with(0));  // Default: level 2.
  Submit(1, 3.0f, with(1));
  Submit(1, 4.0f, with(2));
  Submit(1, 5.0f, with(1));
  Submit(1, 6.0f, with(9));  // Beyond the levels: the default.
  Open();
  for (auto& call : calls_) call->answered.WaitForNotification();
  EXPECT_THAT(slots_->ran(),
              ElementsAre(kGateValue, kGateValue, 3.0f, 5.0f, 2.0f, 4.0f, 6.0f, 1.0f));
}

TEST_F(StandInTest, PreserveOrderingHoldsLaterAnswersBehindEarlierOnes) {
  for (bool preserve : {false, true}) {
    SchedulerOptions options = Unbatched();
    options.preserve_ordering = preserve;
    Start({{}, {}}, options);
    Call& first = Submit(1, kGateValue);  // Holds slot r0.
    Call& second = Submit(1, 2.0f);       // Runs on r1 meanwhile.
    if (!preserve) {
      second.answered.WaitForNotification();
      EXPECT_FALSE(first.answered.HasBeenNotified());
    } else {
      absl::SleepFor(absl::Milliseconds(50));
      EXPECT_FALSE(second.answered.HasBeenNotified()) << "answered before the first";
      EXPECT_THAT(slots_->ran(), ElementsAre(2.0f));  // It did run.
    }
    Open();
    first.answered.WaitForNotification();
    second.answered.WaitForNotification();
    if (preserve) {
      EXPECT_LE(first.answered_at, second.answered_at);
    }
    scheduler_.reset();
    calls_.clear();
  }
}

TEST_F(StandInTest, ARequestsTimeoutShortensThePolicysOnlyWhenAllowed) {
  for (bool allowed : {true, false}) {
    SchedulerOptions options = Unbatched();
    options.default_queue_policy.default_timeout = absl::Seconds(60);
    options.default_queue_policy.allow_timeout_override = allowed;
    clock_ = &manual_clock_;
    Start({{}}, options);
    Block(2);
    RequestContext context;
    context.timeout = absl::Milliseconds(20);
    Call& call = Submit(1, 1.0f, context);
    manual_clock_.Advance(absl::Milliseconds(100));
    if (allowed) {
      call.answered.WaitForNotification();
      EXPECT_EQ(call.status.code(), absl::StatusCode::kDeadlineExceeded);
      EXPECT_THAT(call.status.message(), HasSubstr("past its timeout"));
    } else {
      absl::SleepFor(absl::Milliseconds(20));  // Some polls of the loop: none answers it.
      EXPECT_FALSE(call.answered.HasBeenNotified());
    }
    Open();
    call.answered.WaitForNotification();
    EXPECT_EQ(call.status.ok(), !allowed);
    scheduler_.reset();
    calls_.clear();
  }
}

TEST_F(StandInTest, DelayedRequestsRunAfterThoseThatDidNotTimeOut) {
  SchedulerOptions options = Unbatched();
  options.default_queue_policy.default_timeout = absl::Milliseconds(20);
  options.default_queue_policy.timeout_action = QueuePolicy::TimeoutAction::kDelay;
  clock_ = &manual_clock_;
  Start({{}}, options);
  Block(2);
  Submit(1, 1.0f);
  manual_clock_.Advance(absl::Milliseconds(60));  // 1 timed out: delayed.
  Submit(1, 2.0f);
  Open();
  for (auto& call : calls_) {
    call->answered.WaitForNotification();
    EXPECT_TRUE(call->status.ok()) << call->status;
  }
  EXPECT_THAT(slots_->ran(), ElementsAre(kGateValue, kGateValue, 2.0f, 1.0f));
}

TEST_F(StandInTest, SmallBatchesGoWholeToFreeSlotsAtTheSameTime) {
  // Each slice costs a fixed 20 ms: splitting a small batch only adds cost.
  Start({{0.02, 0}, {0.02, 0}}, Unbatched());
  ASSERT_TRUE(scheduler_->Warm(/*budget_seconds=*/0.01).ok());
  Call& a = Submit(2, 10.0f);
  Call& b = Submit(2, 11.0f);
  a.answered.WaitForNotification();
  b.answered.WaitForNotification();
  ASSERT_EQ(a.report.slices.size(), 1u);
  ASSERT_EQ(b.report.slices.size(), 1u);
  EXPECT_NE(a.report.slices[0].slot, b.report.slices[0].slot);
}

// With a servable that lends idle slots' cores (a ReplicaSet's wide
// replica), a batch on one slot that finds the other slots idle and nothing
// queued is marked widened, and every slot is held until it ends: requests
// arriving meanwhile queue and fuse into one batch, split and not widened.
TEST_F(StandInTest, ALoneBatchOnIdleSlotsIsWidenedAndHoldsThemUntilItEnds) {
  SchedulerOptions options;
  options.max_batch_size = 8;
  Start({{}, {}}, options);
  slots_->lends = true;
  Block(1);
  Call& b = Submit(1, 1.0f);
  Call& c = Submit(1, 2.0f);
  // Slot r1 is idle, yet held for the widened batch. (If it were not, b
  // would run there at once: its slot sleeps no time.)
  EXPECT_FALSE(b.answered.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  Open();
  for (auto& call : calls_) call->answered.WaitForNotification();
  ASSERT_EQ(calls_[0]->report.slices.size(), 1u);
  EXPECT_TRUE(calls_[0]->report.slices[0].widened);
  EXPECT_EQ(b.report.batch_requests, 2);
  EXPECT_EQ(c.report.batch_requests, 2);
  ASSERT_EQ(b.report.slices.size(), 2u);
  EXPECT_FALSE(b.report.slices[0].widened);
  EXPECT_FALSE(b.report.slices[1].widened);
}

// Lending is for a model without concurrent load: a request that came while
// another was queued or running is not widened, even when it starts alone on
// idle slots (two rows on a core each serve more than one row on both); one
// that comes to an idle model is.
TEST_F(StandInTest, ARequestThatCameUnderLoadIsNotWidened) {
  SchedulerOptions options;
  options.max_batch_size = 1;
  Start({{}, {}}, options);
  slots_->lends = true;
  Block(1);
  Call& queued = Submit(1, 1.0f);
  Open();
  queued.answered.WaitForNotification();
  calls_[0]->answered.WaitForNotification();
  EXPECT_TRUE(calls_[0]->report.slices[0].widened);
  EXPECT_FALSE(queued.report.slices[0].widened);
  while (scheduler_->pending() > 0) absl::SleepFor(absl::Milliseconds(1));
  Call& later = Submit(1, 2.0f);
  later.answered.WaitForNotification();
  EXPECT_TRUE(later.report.slices[0].widened);
}

TEST_F(StandInTest, QueuedRequestsAreFusedWhileTheSlotIsBusy) {
  SchedulerOptions options;
  options.max_batch_size = 8;
  Start({{}}, options);
  Block(1);
  for (int i = 0; i < 5; ++i) Submit(2, static_cast<float>(i));
  Open();
  for (auto& call : calls_) call->answered.WaitForNotification();
  // 10 rows queued: a batch of 8 (four requests), then the last one.
  EXPECT_EQ(calls_[1]->report.batch_rows, 8);
  EXPECT_EQ(calls_[1]->report.batch_requests, 4);
  EXPECT_EQ(calls_[4]->report.first_row, 6);
  EXPECT_EQ(calls_[5]->report.batch_rows, 2);
  for (int i = 1; i <= 5; ++i) {
    const Tensor& y = calls_[i]->outputs.outputs[0];
    ASSERT_EQ(y.shape(), (Shape{2, 4}));
    EXPECT_EQ(y.data<float>()[0], 2.0f * static_cast<float>(i - 1));
  }
}

// The queue delay is kept on the scheduler's clock: an hour of it takes
// no hour here.
TEST_F(StandInTest, ABatchWaitsItsQueueDelayThenRunsWhatGathered) {
  SchedulerOptions options;
  options.max_batch_size = 8;
  options.preferred_batch_sizes = {8};
  options.max_queue_delay = absl::Hours(1);
  clock_ = &manual_clock_;
  Start({{}}, options);
  Open();
  Call& first = Submit(2, 1.0f);
  manual_clock_.Advance(absl::Minutes(59));
  Call& second = Submit(2, 2.0f);
  absl::SleepFor(absl::Milliseconds(20));  // Some polls of the loop: neither runs yet.
  EXPECT_FALSE(first.answered.HasBeenNotified());
  EXPECT_EQ(scheduler_->pending(), 2u);
  manual_clock_.Advance(absl::Minutes(1));
  first.answered.WaitForNotification();
  second.answered.WaitForNotification();
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.report.batch_rows, 4);
  EXPECT_EQ(first.report.batch_requests, 2);
  EXPECT_EQ(first.report.queue, absl::Hours(1));
  EXPECT_EQ(second.report.queue, absl::Minutes(1));
}

TEST_F(StandInTest, APreferredSizeEndsABatchEarly) {
  SchedulerOptions options;
  options.max_batch_size = 8;
  options.preferred_batch_sizes = {4};
  Start({{}}, options);
  Block(1);
  for (int i = 0; i < 3; ++i) Submit(2, static_cast<float>(i));
  Open();
  for (auto& call : calls_) call->answered.WaitForNotification();
  EXPECT_EQ(calls_[1]->report.batch_rows, 4);
  EXPECT_EQ(calls_[3]->report.batch_rows, 2);
}

TEST_F(StandInTest, MeasuredWeightsSettleNearTheSlotsSpeedsAndBeatEqualShares) {
  // r1 takes 3x as long per row as r0.
  // Milliseconds per row, so that sleeping late on a busy machine (ctest
  // runs other tests beside this one) stays small beside them.
  Start({{0.001, 0.002}, {0.001, 0.006}}, Unbatched());
  ASSERT_TRUE(scheduler_->Warm(/*budget_seconds=*/0.05).ok());
  absl::Time start = absl::Now();
  // Past the scheduler's re-measuring interval (1 s), so that a slot misjudged
  // while the machine was busy gets measured again.
  for (int i = 0; i < 20; ++i) Submit(40, 1.0f).answered.WaitForNotification();
  const absl::Duration measured = (absl::Now() - start) / 2;
  const ScheduleReport& last = calls_.back()->report;
  ASSERT_EQ(last.slices.size(), 2u);
  const double share = static_cast<double>(last.slices[0].rows()) / 40.0;
  EXPECT_NEAR(share, 0.75, 0.08) << "r0 got " << last.slices[0].rows() << " of 40 rows";

  // Equal shares, the split every batch got before measuring: 20 rows on r1
  // take 121 ms where 3:1 shares finish both in about 61 ms.
  start = absl::Now();
  for (int i = 0; i < 10; ++i) {
    testing::TensorSink sink;
    absl::Notification done;
    slots_->Predict(Rows(40, 1.0f), &sink, [&](absl::Status, std::vector<BatchSlice> slices) {
      EXPECT_EQ(slices.size(), 2u);
      done.Notify();
    });
    done.WaitForNotification();
  }
  const absl::Duration equal = absl::Now() - start;
  EXPECT_LT(measured, equal * 0.75) << measured << " vs " << equal;
}

TEST_F(StandInTest, ATrainingStepRunsAloneBetweenTheBatchesQueuedAroundIt) {
  SchedulerOptions options;
  options.max_batch_size = 8;
  Start({{}, {}}, options, /*trainable=*/true);
  Call& gated = Submit(1, kGateValue);  // Holds one slot.
  while (scheduler_->pending() > 0) absl::SleepFor(absl::Milliseconds(1));
  Call& before = Submit(2, 1.0f);  // Queued before the step.
  Call& step = SubmitStep(4, 5.0f, 0.25f);
  Call& after1 = Submit(2, 2.0f);
  Submit(1, 3.0f);
  before.answered.WaitForNotification();  // On the other slot.
  absl::SleepFor(absl::Milliseconds(30));
  // The step waits for the batch still running on r0; the requests behind
  // it wait for the step, though r1 is free.
  EXPECT_FALSE(step.answered.HasBeenNotified());
  EXPECT_FALSE(after1.answered.HasBeenNotified());
  Open();
  for (auto& call : calls_) {
    call->answered.WaitForNotification();
    EXPECT_TRUE(call->status.ok()) << call->status;
  }
  EXPECT_FALSE(slots_->overlapped) << "a slice ran while the step did";
  // Rows in the order they ran: the step (-5) after both batches before it;
  // the last two requests' rows after it (one batch, perhaps split).
  std::vector<float> ran = slots_->ran();
  ASSERT_EQ(ran.size(), 7u);
  EXPECT_THAT(std::vector<float>(ran.begin(), ran.begin() + 4),
              ElementsAre(1.0f, 1.0f, kGateValue, -5.0f));
  EXPECT_THAT(std::vector<float>(ran.begin() + 4, ran.end()),
              UnorderedElementsAre(2.0f, 2.0f, 3.0f));
  ASSERT_TRUE(step.report.step.has_value());
  EXPECT_FLOAT_EQ(step.report.step->loss, 0.25);
  EXPECT_EQ(step.report.step->samples, 4);
  EXPECT_EQ(step.report.batch_requests, 1);
  EXPECT_GE(step.report.infer, absl::Milliseconds(20));
  EXPECT_EQ(after1.report.batch_rows, 3);  // The two behind it, fused.
  EXPECT_FALSE(gated.report.step.has_value());
}

TEST_F(StandInTest, ATrainingStepHasItsPriorityAndDeadlineInTheQueue) {
  SchedulerOptions options = Unbatched();
  options.priority_levels = 2;
  options.default_priority_level = 2;
  Start({{}}, options, /*trainable=*/true);
  Block(2);
  RequestContext low, urgent, late;
  low.priority = 2;
  urgent.priority = 1;
  late.deadline = absl::Now() + absl::Milliseconds(20);
  Call& expired = SubmitStep(1, 7.0f, 1.0f, late);
  Call& step = SubmitStep(1, 8.0f, 1.0f, low);
  Call& first = Submit(1, 4.0f, urgent);   // Level 1 passes the level-2 step.
  expired.answered.WaitForNotification();  // While the slot is still held.
  EXPECT_EQ(expired.status.code(), absl::StatusCode::kDeadlineExceeded);
  Open();
  step.answered.WaitForNotification();
  first.answered.WaitForNotification();
  EXPECT_TRUE(step.status.ok()) << step.status;
  EXPECT_THAT(slots_->ran(), ElementsAre(kGateValue, kGateValue, 4.0f, -8.0f));
  EXPECT_EQ(trainer_->steps(), 1);
}

TEST_F(StandInTest, AStepForAModelWithoutATrainingSideFailsPrecondition) {
  Start({{}}, Unbatched());
  Call& step = SubmitStep(1, 1.0f, 1.0f);
  step.answered.WaitForNotification();
  EXPECT_EQ(step.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(step.status.message(), HasSubstr("cannot be trained"));
  Submit(1, 2.0f).answered.WaitForNotification();  // The queue goes on.
  EXPECT_TRUE(calls_.back()->status.ok());
}

TEST_F(StandInTest, ASlotsShareIsCappedAtTheLargestSliceItsMemoryHolds) {
  // r1 is 3x faster but holds at most 8 rows (a GPU with less memory).
  SchedulerOptions options = Unbatched();
  options.warmup_max_rows = 64;
  Start({{0.001, 0.002}, {0.001, 0.001, 8}}, options);
  ASSERT_TRUE(scheduler_->Warm(/*budget_seconds=*/0.2).ok());  // 16 rows fail: cap 8.
  const int refused_while_warming = slots_->out_of_memory.load();
  EXPECT_GE(refused_while_warming, 1);
  for (int i = 0; i < 3; ++i) {
    Call& call = Submit(40, 1.0f);
    call.answered.WaitForNotification();
    ASSERT_TRUE(call.status.ok()) << call.status;
    ASSERT_EQ(call.report.slices.size(), 2u);
    for (const BatchSlice& slice : call.report.slices) {
      if (slice.slot == 1) {
        EXPECT_LE(slice.rows(), 8);
      }
    }
    EXPECT_EQ(calls_.back()->outputs.outputs[0].data<float>()[39 * 4], 2.0f);
  }
  EXPECT_EQ(slots_->out_of_memory.load(), refused_while_warming);  // No request was refused.
}

TEST_F(StandInTest, ABatchWhosePlansDidNotFitRunsAgainWithinTheSlotsMemory) {
  // Not warmed: the first split gives r1 half, which does not fit.
  Start({{}, {0, 0, 5}}, Unbatched());
  Call& call = Submit(20, 3.0f);
  call.answered.WaitForNotification();
  ASSERT_TRUE(call.status.ok()) << call.status;
  EXPECT_EQ(slots_->out_of_memory.load(), 1);
  int64_t on_r1 = 0;
  for (const BatchSlice& slice : call.report.slices) on_r1 += slice.slot == 1 ? slice.rows() : 0;
  EXPECT_LE(on_r1, 5);
  const Tensor& y = call.outputs.outputs[0];
  ASSERT_EQ(y.shape(), (Shape{20, 4}));
  for (int64_t i = 0; i < 80; ++i) ASSERT_EQ(y.data<float>()[i], 6.0f) << i;

  // Too large for every slot together: the device's error, once the caps
  // stop shrinking.
  Start({{0, 0, 4}, {0, 0, 5}}, Unbatched());
  Call& too_big = Submit(20, 3.0f);
  too_big.answered.WaitForNotification();
  EXPECT_EQ(too_big.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status.message(), HasSubstr("do not fit"));
  EXPECT_GE(slots_->out_of_memory.load(), 2);
  EXPECT_LE(slots_->out_of_memory.load(), 8);
}

// What a scheduler tells its observer about its queue's length.
class PendingRecorder : public SchedulerObserver {
 public:
  void OnBatch(const std::string&, int64_t, int) override {}
  void OnRefused(const std::string&, const char*) override {}
  void OnPending(const std::string&, size_t pending) override {
    absl::MutexLock lock(&mu);
    last = pending;
    ++reports;
  }
  void OnSlotSpeed(const std::string&, const std::string&, const std::string&, double,
                   double) override {}

  absl::Mutex mu;
  size_t last ABSL_GUARDED_BY(mu) = 12345;
  int reports ABSL_GUARDED_BY(mu) = 0;
};

TEST(SchedulerPendingTest, TheCountStartsAtZeroAndEndsAtZeroAfterConcurrentBursts) {
  PendingRecorder recorder;
  auto slots =
      std::make_shared<StandInSlots>(std::vector<StandInSlots::Speed>{{0.0002, 0}, {0.0002, 0}});
  SchedulerOptions options;
  options.dynamic_batching = false;
  Scheduler scheduler(
      Scheduler::Environment{"standin", slots, nullptr, options, &recorder, RealClock(), nullptr});
  {
    absl::MutexLock lock(&recorder.mu);
    EXPECT_EQ(recorder.reports, 1);  // At the start, before any request.
    EXPECT_EQ(recorder.last, 0u);
  }
  // Submitting threads and the scheduler's loop tell counts outside the
  // scheduler's lock; the gauge must still end at the queue's length.
  constexpr int kThreads = 8, kEach = 50;
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < kThreads * kEach; ++i) {
    calls.push_back(std::make_unique<Call>());
    calls.back()->inputs = Rows(1, 1.0f);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) scheduler.Submit(RequestFor(*calls[t * kEach + i]));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (auto& call : calls) {
    call->answered.WaitForNotification();
    ASSERT_TRUE(call->status.ok()) << call->status;
  }
  EXPECT_EQ(scheduler.pending(), 0u);
  absl::MutexLock lock(&recorder.mu);
  EXPECT_EQ(recorder.last, 0u);
  EXPECT_GT(recorder.reports, kThreads * kEach);
}

// Batches on real CPU replicas of a model slow enough to be stopped mid-run
// (24 MatMul + Relu layers of 512 x 512, run on 1024 rows: a second or so on
// one thread): a batch stops at its next kernel once none of its requests
// is wanted any more, and runs on while any one is. `full_` is what a whole
// run takes here, measured first; the bounds are fractions of it, so a busy
// machine slows both sides alike.
constexpr int64_t kRows = 1024;
constexpr int64_t kWidth = 512;

class SchedulerStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_ = testing::MakeCpuReplicaSet(
        testing::LoadOrDie(testing::MatMulChainOnnx(24, kWidth), "chain"), {1});
    // Builds the plans of kRows and of half of it, then times a whole run:
    // the faster of two, since a run slowed by a neighbour (another test, a
    // sanitizer) would make every bound below too generous.
    ASSERT_TRUE(testing::PredictAndWait(*set_, Rows(kRows / 2, 1)).status.ok());
    ASSERT_TRUE(testing::PredictAndWait(*set_, Rows(kRows, 1)).status.ok());
    full_ = absl::InfiniteDuration();
    for (uint64_t seed : {2, 3}) {
      const absl::Time start = absl::Now();
      ASSERT_TRUE(testing::PredictAndWait(*set_, Rows(kRows, seed)).status.ok());
      full_ = std::min(full_, absl::Now() - start);
    }
  }

  static std::vector<Tensor> Rows(int64_t rows, uint64_t seed) {
    return {testing::RandomTensor({rows, kWidth}, seed)};
  }
  std::unique_ptr<Scheduler> MakeScheduler(SchedulerOptions options) {
    return std::make_unique<Scheduler>(Scheduler::Environment{
        "chain", set_, nullptr, std::move(options), nullptr, RealClock(), nullptr});
  }
  // A request the test can cancel, and which tells once its batch is running
  // its kernels: the queue and the dispatch ask a request whether it is
  // still wanted a few times, a running batch once per kernel (24 here), so
  // the 8th asking comes from a kernel. Waiting for that, not for a fraction
  // of `full_`, keeps a run that goes faster than measured from finishing
  // before the test stops it.
  struct Watch {
    std::atomic<bool> cancelled{false};
    std::atomic<int> asked{0};
    absl::Notification running;
  };
  static constexpr int kAskedOnceRunning = 8;
  static RequestContext Watched(std::shared_ptr<Watch> watch) {
    RequestContext context;
    context.cancelled = [watch] {
      if (watch->asked.fetch_add(1) + 1 == kAskedOnceRunning) watch->running.Notify();
      return watch->cancelled.load();
    };
    return context;
  }
  // Outputs as running the call's rows alone gives them. Tolerance: the same
  // kernels, but a batch of other rows may be blocked otherwise, changing the
  // order of float sums over 24 layers (1.05e-6 seen).
  void ExpectAnsweredInFull(Call& call) {
    ASSERT_TRUE(call.status.ok()) << call.status;
    testing::PredictOutcome alone = testing::PredictAndWait(*set_, call.inputs);
    ASSERT_TRUE(alone.status.ok()) << alone.status;
    ASSERT_EQ(call.outputs.outputs.size(), 1u);
    EXPECT_LT(testing::RelativeL2(call.outputs.outputs[0], alone.outputs[0]), 1e-5);
  }

  std::shared_ptr<ReplicaSet> set_;
  absl::Duration full_;
};

TEST_F(SchedulerStopTest, ACancelledRequestStopsItsRunningBatchAtAKernel) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler({});
  auto watch = std::make_shared<Watch>();
  Call call;
  call.inputs = Rows(kRows, 3);
  scheduler->Submit(RequestFor(call, Watched(watch)));
  watch->running.WaitForNotification();
  const absl::Time cancelled_at = absl::Now();
  watch->cancelled.store(true);
  call.answered.WaitForNotification();
  EXPECT_EQ(call.status.code(), absl::StatusCode::kCancelled) << call.status;
  EXPECT_THAT(call.status.message(), HasSubstr("stopped before kernel"));
  EXPECT_EQ(call.report.batch_requests, 1);  // Dispatched: stopped running, not queued.
  EXPECT_LT(call.answered_at - cancelled_at, full_ / 2) << "a whole run takes " << full_;
  // The slot serves the next request in full.
  Call next;
  next.inputs = Rows(kRows, 4);
  scheduler->Submit(RequestFor(next));
  next.answered.WaitForNotification();
  ExpectAnsweredInFull(next);
}

TEST_F(SchedulerStopTest, ADeadlinePassingWhileItsBatchRunsStopsIt) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler({});
  Call call;
  call.inputs = Rows(kRows, 5);
  RequestContext context;
  context.deadline = absl::Now() + full_ / 4;
  scheduler->Submit(RequestFor(call, context));
  call.answered.WaitForNotification();
  EXPECT_EQ(call.status.code(), absl::StatusCode::kDeadlineExceeded) << call.status;
  EXPECT_THAT(call.status.message(), HasSubstr("stopped before kernel"));
  EXPECT_EQ(call.report.batch_requests, 1);
  EXPECT_LT(call.answered_at - context.deadline, full_ / 2) << "a whole run takes " << full_;
}

// Two requests fused into one batch: one cancelling does not stop the other's
// rows; both cancelling does.
SchedulerOptions FusingTwo() {
  SchedulerOptions options;
  options.max_batch_size = kRows;
  options.max_queue_delay = absl::Seconds(5);  // Until both are in: the batch is full then.
  return options;
}

TEST_F(SchedulerStopTest, AFusedBatchRunsOnWhileOneOfItsRequestsIsStillWanted) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(FusingTwo());
  auto watch = std::make_shared<Watch>();
  Call gone, kept;
  gone.inputs = Rows(kRows / 2, 6);
  kept.inputs = Rows(kRows / 2, 7);
  scheduler->Submit(RequestFor(gone, Watched(watch)));
  scheduler->Submit(RequestFor(kept));
  watch->running.WaitForNotification();
  watch->cancelled.store(true);
  kept.answered.WaitForNotification();
  gone.answered.WaitForNotification();
  EXPECT_EQ(kept.report.batch_requests, 2);
  ExpectAnsweredInFull(kept);
}

TEST_F(SchedulerStopTest, AFusedBatchStopsOnceNoneOfItsRequestsIsWanted) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(FusingTwo());
  auto first = std::make_shared<Watch>();
  auto second = std::make_shared<Watch>();
  Call a, b;
  a.inputs = Rows(kRows / 2, 8);
  b.inputs = Rows(kRows / 2, 9);
  scheduler->Submit(RequestFor(a, Watched(first)));
  scheduler->Submit(RequestFor(b, Watched(second)));
  first->running.WaitForNotification();
  first->cancelled.store(true);
  // The batch asks `b` only once `a` is no longer wanted: its 8th asking
  // comes from a later kernel of the same run.
  second->running.WaitForNotification();
  const absl::Time cancelled_at = absl::Now();
  second->cancelled.store(true);
  for (Call* call : {&a, &b}) {
    call->answered.WaitForNotification();
    EXPECT_EQ(call->status.code(), absl::StatusCode::kCancelled) << call->status;
    EXPECT_THAT(call->status.message(), HasSubstr("stopped before kernel"));
    EXPECT_EQ(call->report.batch_requests, 2);
    EXPECT_LT(call->answered_at - cancelled_at, full_ / 2) << "a whole run takes " << full_;
  }
}

// What ServingCore::StopInFlight does once a shutdown's grace period is
// over: the running batch stops at its next kernel, the one waiting on the
// slot's stream does not start, and the queued one is answered without
// running; all UNAVAILABLE.
TEST_F(SchedulerStopTest, OnceTheServerStopsEveryRequestIsAnsweredUnavailable) {
  SchedulerOptions options;
  options.dynamic_batching = false;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  std::atomic<bool> stopped{false};
  auto first = std::make_shared<Watch>();
  std::vector<std::unique_ptr<Call>> calls;
  for (uint64_t seed : {10, 11, 12}) {
    calls.push_back(std::make_unique<Call>());
    calls.back()->inputs = Rows(kRows, seed);
    RequestContext watched = seed == 10 ? Watched(first) : RequestContext{};
    watched.server_stopped = &stopped;
    scheduler->Submit(RequestFor(*calls.back(), watched));
  }
  first->running.WaitForNotification();
  const absl::Time stopped_at = absl::Now();
  stopped.store(true);
  for (const auto& call : calls) {
    call->answered.WaitForNotification();
    EXPECT_EQ(call->status.code(), absl::StatusCode::kUnavailable) << call->status;
    EXPECT_LT(call->answered_at - stopped_at, full_ / 2) << "a whole run takes " << full_;
  }
  EXPECT_THAT(calls[0]->status.message(), HasSubstr("stopped before kernel"));
  EXPECT_THAT(calls[1]->status.message(), HasSubstr("did not start"));
  EXPECT_THAT(calls[2]->status.message(), HasSubstr("while queued"));
}

}  // namespace
}  // namespace replicad
