// TrainStepStream against a stand-in queue whose steps the test completes:
// steps run one at a time in the order added, each answered once and in
// order; the one waiting is posted as upcoming; a step added while an
// answer goes out (the race of a protocol's read with the training
// thread's answer) waits its turn and is never dropped; the first failure
// ends the stream, answering those waiting Aborted without running them and
// withdrawing the upload hint.
#include "core/serve/train_step_stream.h"

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;

// A request's id travels as its version, and a bound step's as its one
// target value.
TrainRequest Request(int64_t id, const std::string& model = "m") {
  TrainRequest request;
  request.model = model;
  request.version = id;
  return request;
}

int64_t IdOf(const BoundTrainStep& step) { return step.targets.data<int64_t>()[0]; }

class StandInQueue : public TrainStepQueue {
 public:
  absl::StatusOr<BoundTrainStep> BindTrainStep(const TrainRequest& request,
                                               std::shared_ptr<const void>,
                                               std::shared_ptr<LoadedModel>* found) override {
    *found = model_;
    if (request.model != "m") {
      return absl::InvalidArgumentError("model: expected 'm', received '" + request.model + "'");
    }
    BoundTrainStep step;
    step.model = model_;
    step.targets = Tensor::Host(DType::kInt64, {1});
    step.targets.data<int64_t>()[0] = request.version;
    return step;
  }
  void TrainBound(BoundTrainStep step, RequestContext, TrainDone done) override {
    EXPECT_TRUE(running_.empty()) << "step " << IdOf(step) << " queued while another runs";
    queued.push_back(IdOf(step));
    running_.push_back(std::move(done));
  }
  void ExpectTrainStep(const BoundTrainStep& step) override { expected.push_back(IdOf(step)); }
  void WithdrawTrainStep(const BoundTrainStep& step) override { withdrawn.push_back(IdOf(step)); }

  // Completes the running step: applied as step `step`, or failed.
  void Complete(absl::StatusOr<int64_t> step) {
    ASSERT_FALSE(running_.empty());
    TrainDone done = std::move(running_.front());
    running_.pop_front();
    if (!step.ok()) return std::move(done)(step.status(), model_);
    DataParallelTrainer::StepResult result;
    result.step = *step;
    std::move(done)(result, model_);
  }
  bool running() const { return !running_.empty(); }

  std::vector<int64_t> queued, expected, withdrawn;

 private:
  std::shared_ptr<LoadedModel> model_ = std::make_shared<LoadedModel>();
  std::deque<TrainDone> running_;
};

// What the stream answered, in order: the step a result applied, or the
// error's code.
struct Answers {
  std::vector<std::string> seen;
  std::function<void()> during;  // Runs inside the next answer, once.

  TrainStepStream::Answer Callback() {
    return [this](absl::StatusOr<TrainStepStream::Result> result, std::shared_ptr<LoadedModel>) {
      seen.push_back(result.ok() ? "step " + std::to_string(result->step)
                                 : std::string(absl::StatusCodeToString(result.status().code())));
      if (during) std::exchange(during, nullptr)();
    };
  }
};

// A stream over a stand-in queue, answering into `answers`.
class TrainStepStreamTest : public ::testing::Test {
 protected:
  StandInQueue queue;
  Answers answers;
  std::shared_ptr<TrainStepStream> stream =
      std::make_shared<TrainStepStream>(queue, RequestContext{}, answers.Callback());
};

TEST_F(TrainStepStreamTest, StepsRunOneAtATimeInOrderAndTheWaitingOneIsExpected) {
  EXPECT_TRUE(stream->Add(Request(1), nullptr));
  EXPECT_TRUE(stream->HasRoom());  // 1 runs; room for the next.
  EXPECT_TRUE(stream->Add(Request(2), nullptr));
  EXPECT_FALSE(stream->HasRoom());  // 2 waits.
  EXPECT_THAT(queue.queued, ElementsAre(1));
  EXPECT_THAT(queue.expected, ElementsAre(2));
  queue.Complete(1);
  EXPECT_THAT(queue.queued, ElementsAre(1, 2));
  EXPECT_TRUE(stream->HasRoom());
  EXPECT_TRUE(stream->Add(Request(3), nullptr));
  queue.Complete(2);
  queue.Complete(3);
  EXPECT_FALSE(queue.running());
  EXPECT_THAT(queue.queued, ElementsAre(1, 2, 3));
  EXPECT_THAT(queue.expected, ElementsAre(2, 3));
  EXPECT_THAT(answers.seen, ElementsAre("step 1", "step 2", "step 3"));
  EXPECT_TRUE(queue.withdrawn.empty());
}

// A protocol that reads while an answer goes out adds a step then: with a
// step already taken to run next, or with none waiting, it waits its turn.
TEST_F(TrainStepStreamTest, AStepAddedWhileAnAnswerGoesOutWaitsItsTurn) {
  ASSERT_TRUE(stream->Add(Request(1), nullptr));
  ASSERT_TRUE(stream->Add(Request(2), nullptr));
  answers.during = [&] { EXPECT_TRUE(stream->Add(Request(3), nullptr)); };
  queue.Complete(1);  // 2 runs after the answer; 3, added during it, waits.
  EXPECT_THAT(queue.queued, ElementsAre(1, 2));
  answers.during = [&] { EXPECT_TRUE(stream->Add(Request(4), nullptr)); };
  queue.Complete(2);
  queue.Complete(3);
  // Nothing waits now: 5, added while 4's answer goes out, runs after it.
  answers.during = [&] { EXPECT_TRUE(stream->Add(Request(5), nullptr)); };
  queue.Complete(4);
  EXPECT_THAT(queue.queued, ElementsAre(1, 2, 3, 4, 5));
  queue.Complete(5);
  EXPECT_THAT(answers.seen, ElementsAre("step 1", "step 2", "step 3", "step 4", "step 5"));
}

// Steps past the room a protocol should leave are kept, never dropped.
TEST_F(TrainStepStreamTest, StepsPastTheRoomAreKept) {
  for (int64_t id = 1; id <= 4; ++id) EXPECT_TRUE(stream->Add(Request(id), nullptr));
  for (int64_t id = 1; id <= 4; ++id) queue.Complete(id);
  EXPECT_THAT(queue.queued, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(answers.seen, ElementsAre("step 1", "step 2", "step 3", "step 4"));
}

// The first failure answers the steps waiting Aborted without running
// them, withdraws the hint of the last one expected, and takes no more.
TEST_F(TrainStepStreamTest, TheFirstFailureEndsTheStream) {
  ASSERT_TRUE(stream->Add(Request(1), nullptr));
  ASSERT_TRUE(stream->Add(Request(2), nullptr));
  ASSERT_TRUE(stream->Add(Request(3), nullptr));
  queue.Complete(absl::InvalidArgumentError("targets[3] must be a class in [0, 10), received 99"));
  EXPECT_THAT(answers.seen, ElementsAre("INVALID_ARGUMENT", "ABORTED", "ABORTED"));
  EXPECT_THAT(queue.queued, ElementsAre(1));
  EXPECT_THAT(queue.withdrawn, ElementsAre(3));
  EXPECT_FALSE(stream->HasRoom());
  EXPECT_FALSE(stream->Add(Request(4), nullptr));
  EXPECT_EQ(answers.seen.size(), 3u);
}

// A request that cannot be decoded or bound is answered in its turn, after
// the step before it; a step that fails before its trainer took it (the
// queue refused it) withdraws its hint.
TEST_F(TrainStepStreamTest, BadRequestsAndRefusedStepsAnswerInTheirTurn) {
  ASSERT_TRUE(stream->Add(Request(1), nullptr));
  ASSERT_TRUE(stream->Add(Request(2, "unknown"), nullptr));
  queue.Complete(1);
  EXPECT_THAT(answers.seen, ElementsAre("step 1", "INVALID_ARGUMENT"));
  EXPECT_FALSE(stream->Add(absl::InvalidArgumentError("inputs[0]: bad dtype"), nullptr));

  StandInQueue refusing;
  Answers refused;
  auto second = std::make_shared<TrainStepStream>(refusing, RequestContext{}, refused.Callback());
  ASSERT_TRUE(second->Add(Request(1), nullptr));
  ASSERT_TRUE(second->Add(Request(2), nullptr));
  refusing.Complete(1);
  refusing.Complete(absl::UnavailableError("queue full"));
  EXPECT_THAT(refused.seen, ElementsAre("step 1", "UNAVAILABLE"));
  EXPECT_THAT(refusing.expected, ElementsAre(2));
  EXPECT_THAT(refusing.withdrawn, ElementsAre(2));
}

}  // namespace
}  // namespace replicad
