#include "server/grpc/train_steps_call.h"

#include <chrono>
#include <deque>
#include <memory>
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

// gRPC's operations (StartRead, StartWrite, Finish) are started after the
// lock is let go: their reactions may run at once, on another thread, and
// after Finish the reactor may be gone. An operation decided under the lock
// counts in starting_ until it is started, so that no thread finishes the
// call in between.
class TrainStepsCall final
    : public grpc::ServerBidiReactor<v1::TrainStepRequest, v1::TrainStepResponse> {
 public:
  TrainStepsCall(grpc::CallbackServerContext* context, ServerMetrics& metrics)
      : context_(context), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  void Start(ServingCore& core, const AccessTokens* tokens) {
    if (absl::Status access = CheckAccess(context_, tokens, kMethod); !access.ok()) {
      {
        absl::MutexLock lock(&mu_);
        failure_ = access;
        finished_ = true;
      }
      return End(access, "");
    }
    // The stream outlives nothing of this call: Finish waits until it has
    // no step left, and its answers are this call's last use of it.
    stream_ = std::make_shared<TrainStepStream>(
        core, ContextOf(context_),
        [this](absl::StatusOr<TrainStepStream::Result> result, std::shared_ptr<LoadedModel> model) {
          Answered(std::move(result), model);
        });
    v1::TrainStepRequest* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      next = ReadLocked();
    }
    StartRead(next);
    Started();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      {
        absl::MutexLock lock(&mu_);
        reading_ = false;
        client_done_ = true;
      }
      return MaybeFinish();
    }
    std::shared_ptr<v1::TrainStepRequest> request;
    {
      absl::MutexLock lock(&mu_);
      request = std::move(read_);
    }
    // Its tensors view the message, which the stream keeps with them.
    stream_->Add(TrainRequestOf(*request), request);
    v1::TrainStepRequest* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      // An answer that came meanwhile found no read paused: look again here.
      if (stream_->HasRoom() && !finished_) {
        next = ReadLocked();
      } else {
        paused_ = true;
      }
    }
    if (next != nullptr) {
      StartRead(next);
      return Started();
    }
    MaybeFinish();
  }

  void OnWriteDone(bool ok) override {
    const v1::TrainStepResponse* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      to_write_.pop_front();
      writing_ = false;
      if (!ok) {
        // The client went away: nothing more is written, and the steps it
        // queued are dropped (their context is cancelled).
        to_write_.clear();
        if (failure_.ok())
          failure_ = absl::CancelledError("the client went away during TrainSteps");
      } else if (!to_write_.empty()) {
        writing_ = true;
        ++starting_;
        next = &to_write_.front();
      }
    }
    if (next != nullptr) {
      StartWrite(next);
      return Started();
    }
    MaybeFinish();
  }

  void OnDone() override { delete this; }

 private:
  // A read of the next message, to start once the lock is let go.
  v1::TrainStepRequest* ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    read_ = std::make_shared<v1::TrainStepRequest>();
    reading_ = true;
    paused_ = false;
    ++starting_;
    return read_.get();
  }

  // `count` operations decided under the lock were started; then
  // MaybeFinish, so this is a caller's last use of the call.
  void Started(int count = 1) {
    {
      absl::MutexLock lock(&mu_);
      starting_ -= count;
    }
    MaybeFinish();
  }

  void Answered(absl::StatusOr<TrainStepStream::Result> result,
                const std::shared_ptr<LoadedModel>& model) {
    const v1::TrainStepResponse* write = nullptr;
    v1::TrainStepRequest* read = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (model != nullptr) model_ = model->name;
      if (!result.ok()) {
        if (failure_.ok()) failure_ = result.status();
      } else if (failure_.ok()) {
        to_write_.emplace_back();
        FillTrainStepResponse(*result, *model, &to_write_.back());
        if (!writing_) {
          writing_ = true;
          ++starting_;
          write = &to_write_.front();
        }
      }
      if (paused_ && !client_done_ && !finished_ && stream_->HasRoom()) read = ReadLocked();
    }
    if (write != nullptr) StartWrite(write);
    if (read != nullptr) StartRead(read);
    // The last use of this call: it may be finished and gone after.
    Started((write != nullptr ? 1 : 0) + (read != nullptr ? 1 : 0));
  }

  // Ends the call once nothing is left to do: no step pending, nothing to
  // write, and the client done or a step failed (a read may still be out:
  // it then fails, as the call is over).
  void MaybeFinish() {
    absl::Status status;
    std::string model;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || starting_ > 0 || writing_ || !to_write_.empty() || stream_->pending() > 0) {
        return;
      }
      if (failure_.ok() && (!client_done_ || reading_)) return;
      finished_ = true;
      status = failure_;
      model = model_;
    }
    End(status, model);
  }

  void End(const absl::Status& status, const std::string& model) {
    metrics_.RecordRequest(model, kMethod, status, SecondsSince(start_));
    Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* const context_;
  ServerMetrics& metrics_;
  const std::chrono::steady_clock::time_point start_;
  std::shared_ptr<TrainStepStream> stream_;
  absl::Mutex mu_;
  std::shared_ptr<v1::TrainStepRequest> read_ ABSL_GUARDED_BY(mu_);  // The message being read.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;       // No read until the stream has room.
  bool client_done_ ABSL_GUARDED_BY(mu_) = false;  // Half-closed, cancelled or gone.
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
