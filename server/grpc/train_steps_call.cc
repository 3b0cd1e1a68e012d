#include "server/grpc/train_steps_call.h"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
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
class TrainStepsCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
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
    grpc::ByteBuffer* read = nullptr;
    {
      absl::MutexLock lock(&mu_);
      read = ReadLocked();
    }
    StartRead(read);
    Started(1);
  }

  void OnReadDone(bool ok) override {
    int64_t message = 0;  // Its number, where it is to be taken.
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) client_done_ = true;
      // A client gone, or a step failed: nothing more is taken.
      if (ok && failure_.ok()) {
        message = ++messages_;
        adding_ = true;  // No read starts (and reuses read_) until it is taken.
      }
    }
    if (message > 0) {
      // Decoded outside the lock: a large step takes a while, and the
      // training thread's answers need the lock.
      auto request = std::make_shared<v1::TrainStepRequest>();
      const size_t bytes = read_.Length();
      // gRPC's own decoding, which also lets the wire's bytes go (the step
      // holds its own copy).
      const bool decoded =
          grpc::SerializationTraits<v1::TrainStepRequest>::Deserialize(&read_, request.get()).ok();
      if (decoded) {
        bool take = false;
        {
          absl::MutexLock lock(&mu_);
          // The client may have gone (a write failed) while it was decoded.
          take = failure_.ok();
          if (take) ++unanswered_;  // Before Add, which may answer it at once.
        }
        // Its tensors view the message, which the stream keeps with them.
        const bool taken = take && stream_->Add(TrainRequestOf(*request), request);
        absl::MutexLock lock(&mu_);
        if (take && !taken) --unanswered_;
        adding_ = false;
      } else {
        absl::MutexLock lock(&mu_);
        // The call's end once the steps before it are answered.
        undecodable_ = absl::InvalidArgumentError(absl::StrCat(
            "TrainSteps: message ", message, " (", bytes,
            " bytes) is not a valid replicad.v1.TrainStepRequest: protobuf refuses it"));
        adding_ = false;
      }
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
    // on the training thread; End's) before what follows.
    Ending ended;
    double seconds = 0;
    {
      absl::MutexLock lock(&mu_);
      ended = ended_;
      seconds = ended_seconds_;
    }
    // Counted here, where the context knows whether the client cancelled:
    // a cancelled call's OK never reached it (the reads fail as at a
    // half-close, before or after gRPC learns of the cancel).
    if (ended.status.ok() && context_->IsCancelled()) {
      ended.status = absl::CancelledError("the client cancelled TrainSteps");
    }
    metrics_.RecordRequest(ended.model, kMethod, ended.status, seconds);
    delete this;
  }

 private:
  struct Ending {
    absl::Status status;
    std::string model;
  };

  void Answered(absl::StatusOr<TrainStepStream::Result> result,
                const std::shared_ptr<LoadedModel>& model) {
    grpc::ByteBuffer answer;
    if (result.ok()) {
      v1::TrainStepResponse response;
      FillTrainStepResponse(*result, *model, &response);
      bool own = false;
      const grpc::Status encoded =
          grpc::SerializationTraits<v1::TrainStepResponse>::Serialize(response, &answer, &own);
      if (!encoded.ok()) result = absl::InternalError("TrainSteps: cannot encode an answer");
    }
    Continue([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      --unanswered_;
      if (model != nullptr) model_ = model->name;
      if (!result.ok()) {
        if (failure_.ok()) failure_ = result.status();
      } else if (failure_.ok()) {
        to_write_.push_back(std::move(answer));
      }
    });
  }

  // Applies `change` (if any) under the lock, then starts what it allows:
  // the next write, the next read, or the call's end.
  void Continue(const std::function<void()>& change) {
    const grpc::ByteBuffer* write = nullptr;
    grpc::ByteBuffer* read = nullptr;
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
          undecodable_.ok() && stream_->HasRoom() && to_write_.size() < kMaxAnswersBehind) {
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
  grpc::ByteBuffer* ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    read_.Clear();
    reading_ = true;
    ++starting_;
    return &read_;
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

  // The call's end when nothing is left to do: no step unanswered, none
  // being taken, nothing to write, no operation being started, and the client done (half-closed,
  // cancelled or gone), a step failed or a message could not be decoded (a
  // read may still be out: it then fails, as the call is over). Marks the
  // call finished.
  std::optional<Ending> EndingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || starting_ > 0 || adding_ || writing_ || !to_write_.empty() ||
        unanswered_ > 0) {
      return std::nullopt;
    }
    const absl::Status status = !failure_.ok() ? failure_ : undecodable_;
    if (status.ok() && (!client_done_ || reading_)) return std::nullopt;
    finished_ = true;
    return Ending{status, model_};
  }

  // Once: OnDone counts it after Finish.
  void End(const Ending& ending) {
    {
      absl::MutexLock lock(&mu_);
      ended_ = ending;
      ended_seconds_ = SecondsSince(start_);
    }
    Finish(ToGrpcStatus(ending.status));
  }

  grpc::CallbackServerContext* const context_;
  ServerMetrics& metrics_;
  const std::chrono::steady_clock::time_point start_;
  std::shared_ptr<TrainStepStream> stream_;
  absl::Mutex mu_;
  // The message being read: the read's while one is out, then OnReadDone's
  // until adding_ is cleared (no read starts meanwhile).
  grpc::ByteBuffer read_;
  int64_t messages_ ABSL_GUARDED_BY(mu_) = 0;  // Read so far, for messages.
  // A message that could not be decoded: the call's end once the steps
  // before it are answered.
  absl::Status undecodable_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool adding_ ABSL_GUARDED_BY(mu_) = false;       // A message read is being added to the stream.
  bool client_done_ ABSL_GUARDED_BY(mu_) = false;  // Half-closed, cancelled or gone.
  int unanswered_ ABSL_GUARDED_BY(mu_) = 0;        // Steps the stream took and has not answered.
  std::deque<grpc::ByteBuffer> to_write_ ABSL_GUARDED_BY(mu_);  // Front: being written.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // The first failed step's, which ends the call.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;
  std::string model_ ABSL_GUARDED_BY(mu_);  // For the metrics, once a step named one.
  // Set by End, before Finish; read by OnDone, after it.
  Ending ended_ ABSL_GUARDED_BY(mu_);
  double ended_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartTrainSteps(
    grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics,
    const AccessTokens* tokens) {
  auto* call = new TrainStepsCall(context, metrics);
  call->Start(core, tokens);
  return call;
}

}  // namespace replicad
