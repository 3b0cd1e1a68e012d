#include "server/grpc/train_steps_call.h"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/base/clock.h"
#include "core/serve/train_step_stream.h"
#include "server/grpc/call_context.h"
#include "server/grpc/grpc_status.h"
#include "server/grpc/v1_messages.h"

namespace replicad {
namespace {

constexpr char kMethod[] = "TrainSteps";
// Answers not yet written to a client that does not read them: past this
// many, no message is read (it waits, held back by flow control).
constexpr size_t kMaxAnswersBehind = 8;

// gRPC's operations (StartRead, StartWrite, Finish) are started after the
// lock is let go: their reactions may run at once, on another thread. An
// operation decided under the lock counts in starting_ until it is
// started, so that no thread finishes the call in between. Whether to
// finish is decided in the same critical section as the change that allows
// it: after Finish the reactor may be deleted (OnDone) as soon as no
// reaction runs, and the training thread's answers are no reaction, so the
// thread that finishes is the last to touch the call.
class TrainStepsCall final
    : public grpc::ServerBidiReactor<v1::TrainStepRequest, v1::TrainStepResponse> {
 public:
  TrainStepsCall(grpc::CallbackServerContext* context, ServerMetrics& metrics)
      : context_(context), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  void Start(ServingCore& core, const AccessTokens* tokens) {
    if (absl::Status access = CheckAccess(context_, tokens, kMethod); !access.ok()) {
      {
        absl::MutexLock lock(&mu_);
        finished_ = true;
      }
      return End(Ending{access, ""});
    }
    stream_ = std::make_shared<TrainStepStream>(
        core, ContextOf(context_),
        [this](absl::StatusOr<TrainStepStream::Result> result, std::shared_ptr<LoadedModel> model) {
          Answered(std::move(result), model);
        });
    v1::TrainStepRequest* read = nullptr;
    {
      absl::MutexLock lock(&mu_);
      read = ReadLocked();
    }
    StartRead(read);
    Started(1);
  }

  void OnReadDone(bool ok) override {
    std::shared_ptr<v1::TrainStepRequest> request;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) client_done_ = true;
      // A client gone, or a step failed: nothing more is taken.
      if (ok && failure_.ok()) {
        request = std::move(read_);
        ++unanswered_;  // Before Add, which may answer it at once.
        adding_ = true;
      }
    }
    if (request != nullptr) {
      // Its tensors view the message, which the stream keeps with them.
      const bool taken = stream_->Add(TrainRequestOf(*request), request);
      absl::MutexLock lock(&mu_);
      if (!taken) --unanswered_;
      adding_ = false;
    }
    Continue(nullptr);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      to_write_.pop_front();
      writing_ = false;
      if (!ok) {
        // The client went away: nothing more is written or taken, and the
        // steps it queued are dropped (their context is cancelled).
        to_write_.clear();
        if (failure_.ok())
          failure_ = absl::CancelledError("the client went away during TrainSteps");
      }
    }
    Continue(nullptr);
  }

  void OnDone() override {
    // gRPC calls this after Finish, through its own queues, which TSan does
    // not see: taking the lock orders every write made under it (an answer's,
    // on the training thread) before the destruction.
    { absl::MutexLock lock(&mu_); }
    delete this;
  }

 private:
  struct Ending {
    absl::Status status;
    std::string model;
  };

  void Answered(absl::StatusOr<TrainStepStream::Result> result,
                const std::shared_ptr<LoadedModel>& model) {
    v1::TrainStepResponse response;
    if (result.ok()) FillTrainStepResponse(*result, *model, &response);
    Continue([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      --unanswered_;
      if (model != nullptr) model_ = model->name;
      if (!result.ok()) {
        if (failure_.ok()) failure_ = result.status();
      } else if (failure_.ok()) {
        to_write_.push_back(std::move(response));
      }
    });
  }

  // Applies `change` (if any) under the lock, then starts what it allows:
  // the next write, the next read, or the call's end.
  void Continue(const std::function<void()>& change) {
    const v1::TrainStepResponse* write = nullptr;
    v1::TrainStepRequest* read = nullptr;
    std::optional<Ending> ending;
    {
      absl::MutexLock lock(&mu_);
      if (change) change();
      if (!finished_ && !writing_ && !to_write_.empty()) {
        writing_ = true;
        ++starting_;
        write = &to_write_.front();
      }
      // Not while a message read is on its way into the stream: the room it
      // will take is not yet gone from HasRoom.
      if (!finished_ && !reading_ && !adding_ && !client_done_ && failure_.ok() &&
          stream_->HasRoom() && to_write_.size() < kMaxAnswersBehind) {
        read = ReadLocked();
      }
      if (write == nullptr && read == nullptr) ending = EndingLocked();
    }
    if (write != nullptr) StartWrite(write);
    if (read != nullptr) StartRead(read);
    if (write != nullptr || read != nullptr) {
      // The last use of this call on this path.
      return Started((write != nullptr ? 1 : 0) + (read != nullptr ? 1 : 0));
    }
    if (ending.has_value()) End(*ending);
  }

  // A read of the next message, to start once the lock is let go.
  v1::TrainStepRequest* ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    read_ = std::make_shared<v1::TrainStepRequest>();
    reading_ = true;
    ++starting_;
    return read_.get();
  }

  // `count` operations decided under the lock were started.
  void Started(int count) {
    std::optional<Ending> ending;
    {
      absl::MutexLock lock(&mu_);
      starting_ -= count;
      ending = EndingLocked();
    }
    if (ending.has_value()) End(*ending);
  }

  // The call's end when nothing is left to do: no step unanswered, nothing
  // to write, no operation being started, and the client done (half-closed,
  // cancelled or gone) or a step failed (a read may still be out: it then
  // fails, as the call is over). Marks the call finished.
  std::optional<Ending> EndingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || starting_ > 0 || writing_ || !to_write_.empty() || unanswered_ > 0) {
      return std::nullopt;
    }
    if (failure_.ok() && (!client_done_ || reading_)) return std::nullopt;
    finished_ = true;
    return Ending{failure_, model_};
  }

  void End(const Ending& ending) {
    metrics_.RecordRequest(ending.model, kMethod, ending.status, SecondsSince(start_));
    Finish(ToGrpcStatus(ending.status));
  }

  grpc::CallbackServerContext* const context_;
  ServerMetrics& metrics_;
  const std::chrono::steady_clock::time_point start_;
  std::shared_ptr<TrainStepStream> stream_;
  absl::Mutex mu_;
  std::shared_ptr<v1::TrainStepRequest> read_ ABSL_GUARDED_BY(mu_);  // The message being read.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool adding_ ABSL_GUARDED_BY(mu_) = false;       // A message read is being added to the stream.
  bool client_done_ ABSL_GUARDED_BY(mu_) = false;  // Half-closed, cancelled or gone.
  int unanswered_ ABSL_GUARDED_BY(mu_) = 0;        // Steps the stream took and has not answered.
  std::deque<v1::TrainStepResponse> to_write_ ABSL_GUARDED_BY(mu_);  // Front: being written.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // The first failed step's, which ends the call.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;
  std::string model_ ABSL_GUARDED_BY(mu_);  // For the metrics, once a step named one.
};

}  // namespace

grpc::ServerBidiReactor<v1::TrainStepRequest, v1::TrainStepResponse>* StartTrainSteps(
    grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics,
    const AccessTokens* tokens) {
  auto* call = new TrainStepsCall(context, metrics);
  call->Start(core, tokens);
  return call;
}

}  // namespace replicad
