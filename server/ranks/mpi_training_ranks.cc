#include "server/ranks/mpi_training_ranks.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/device/poll_backoff.h"
#include "core/train/byte_frame.h"

namespace replicad {
namespace {

enum Tag : int {
  kCommandTag = 1,
  kPartialTag = 2,  // A rank's part of a step, to rank 0.
  kSumTag = 3,      // The step's sums, from rank 0.
  kStatisticsTag = 4,
  kStatisticsSumTag = 5,
  kShardTag = 6,         // A rank's shard of a step: its step and rows, to rank 0.
  kShardPlanTag = 7,     // Every rank's rows, or why the shards do not make a step.
  kGatherTag = 8,        // A rank's part of an AllGather, to rank 0.
  kGatheredTag = 9,      // Every rank's parts, from rank 0.
  kGradientTag = 10,     // One parameter's gradient sum, after its rank's part (kPartialTag).
  kSumGradientTag = 11,  // One parameter's sum over the ranks, after kSumTag.
};

// Which communicator a message travels on: each kind of exchange has its
// own, so a late message of one can never be taken for another's.
enum Channel : int { kCommands = 0, kSteps = 1, kStatistics = 2, kGathers = 3 };
constexpr int kChannels = 4;

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

absl::Status MpiStatus(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(call, ": ", MpiError(code)));
}

// A step's part or sums without the gradients, which follow as messages of
// their own (one per parameter, straight from and into the trainer's
// vectors: no copy into a frame): the status, the loss and accuracy sums,
// each gradient's size (none with a failed status), the running statistics.
std::string EncodePartialHeader(const RankPartial& partial) {
  FrameWriter out;
  out.Status(partial.status);
  out.Double(partial.loss_sum);
  out.Double(partial.correct);
  const size_t gradients = partial.status.ok() ? partial.gradients.size() : 0;
  out.Int64(static_cast<int64_t>(gradients));
  for (size_t p = 0; p < gradients; ++p) {
    out.Int64(static_cast<int64_t>(partial.gradients[p].size()));
  }
  out.Int64(static_cast<int64_t>(partial.buffers.size()));
  for (const Tensor& b : partial.buffers) out.HostTensor(b);
  return out.Take();
}

// Into `partial` (its gradients left as they are) and `sizes`.
absl::Status DecodePartialHeader(absl::string_view bytes, RankPartial* partial,
                                 std::vector<size_t>* sizes) {
  FrameReader in(bytes);
  absl::StatusOr<absl::Status> status = in.Status("status");
  if (!status.ok()) return status.status();
  partial->status = *status;
  absl::StatusOr<double> loss = in.Double("loss");
  absl::StatusOr<double> correct = in.Double("correct");
  absl::StatusOr<int64_t> gradients = in.Int64("gradients");
  if (!loss.ok() || !correct.ok() || !gradients.ok()) {
    return absl::InvalidArgumentError("rank message: a step's sums are cut short");
  }
  partial->loss_sum = *loss;
  partial->correct = *correct;
  sizes->clear();
  for (int64_t p = 0; p < *gradients; ++p) {
    absl::StatusOr<int64_t> size = in.Int64("gradient size");
    if (!size.ok()) return size.status();
    if (*size < 0) return absl::InvalidArgumentError("rank message: a negative gradient size");
    sizes->push_back(static_cast<size_t>(*size));
  }
  REPLICAD_ASSIGN_OR_RETURN(int64_t buffers, in.Int64("buffers"));
  partial->buffers.clear();
  for (int64_t b = 0; b < buffers; ++b) {
    absl::StatusOr<Tensor> t = in.HostTensor("running statistic");
    if (!t.ok()) return t.status();
    partial->buffers.push_back(*std::move(t));
  }
  return absl::OkStatus();
}

RankPartial Failed(absl::Status status) {
  RankPartial partial;
  partial.status = std::move(status);
  return partial;
}

std::vector<size_t> SizesOf(const std::vector<std::vector<float>>& gradients) {
  std::vector<size_t> sizes;
  for (const std::vector<float>& g : gradients) sizes.push_back(g.size());
  return sizes;
}

}  // namespace

struct MpiTrainingRanks::Communicators {
  MPI_Comm channels[kChannels] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
};

bool MpiTrainingRanks::LaunchedByMpi() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix), and PMI-1/2 ones.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

MpiTrainingRanks::MpiTrainingRanks(Options options, int rank, int size)
    : options_(std::move(options)),
      rank_(rank),
      size_(size),
      communicators_(std::make_unique<Communicators>()) {}

absl::StatusOr<std::shared_ptr<MpiTrainingRanks>> MpiTrainingRanks::Create(
    const std::vector<double>& local_weights, Options options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::FailedPreconditionError("MPI is initialised once per process");
  int provided = 0;
  if (absl::Status s =
          MpiStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init");
      !s.ok()) {
    return s;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(
        "this MPI library does not support MPI_THREAD_MULTIPLE, which replicad's ranks need");
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::shared_ptr<MpiTrainingRanks> ranks(new MpiTrainingRanks(std::move(options), rank, size));
  for (MPI_Comm& channel : ranks->communicators_->channels) {
    REPLICAD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &channel), "MPI_Comm_dup"));
    MPI_Comm_set_errhandler(channel, MPI_ERRORS_RETURN);
  }
  // Every rank's slot count, then their weights, rank by rank.
  int count = static_cast<int>(local_weights.size());
  std::vector<int> counts(static_cast<size_t>(size));
  if (absl::Status s =
          MpiStatus(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD),
                    "MPI_Allgather");
      !s.ok())
    return s;
  std::vector<int> offsets(static_cast<size_t>(size), 0);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += counts[r];
    for (int s = 0; s < counts[r]; ++s) ranks->slot_ranks_.push_back(r);
  }
  ranks->slot_weights_.resize(static_cast<size_t>(total));
  REPLICAD_RETURN_IF_ERROR(
      MpiStatus(MPI_Allgatherv(local_weights.data(), count, MPI_DOUBLE, ranks->slot_weights_.data(),
                               counts.data(), offsets.data(), MPI_DOUBLE, MPI_COMM_WORLD),
                "MPI_Allgatherv"));
  return ranks;
}

MpiTrainingRanks::~MpiTrainingRanks() {
  // MPI_Finalize waits for every rank; after a rank died it would wait for
  // ever, and the launcher with it (mpirun waits for a rank that exits
  // without it). MPI_Abort ends the whole job instead, non-zero.
  if (!broken().ok()) MPI_Abort(MPI_COMM_WORLD, 75);
  for (MPI_Comm& channel : communicators_->channels) {
    if (channel != MPI_COMM_NULL) MPI_Comm_free(&channel);
  }
  MPI_Finalize();
}

absl::Status MpiTrainingRanks::broken() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

absl::Status MpiTrainingRanks::Break(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    broken_ = absl::UnavailableError(absl::StrCat(
        status.message(),
        "; the training group is broken: replicad exits so that the launcher can restart the job "
        "from its last checkpoint"));
    status = broken_;
  }
  if (options_.on_broken) options_.on_broken(status);
  return status;
}

absl::Status MpiTrainingRanks::Send(int to, int tag, const std::string& bytes, int communicator,
                                    const std::string& what) {
  return SendBytes(to, tag, bytes.data(), bytes.size(), communicator, what);
}

absl::Status MpiTrainingRanks::SendBytes(int to, int tag, const void* data, size_t size,
                                         int communicator, const std::string& what) {
  if (size > static_cast<size_t>(INT_MAX)) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", size,
                                                     " bytes exceed what one MPI message "
                                                     "carries (2 GiB)"));
  }
  MPI_Request request;
  const int posted = MPI_Isend(data, static_cast<int>(size), MPI_BYTE, to, tag,
                               communicators_->channels[communicator], &request);
  if (posted != MPI_SUCCESS) {
    return Break(MpiStatus(posted, absl::StrCat("sending ", what, " to rank ", to)));
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  PollBackoff backoff;
  for (;;) {
    int done = 0;
    const int code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) {
      return Break(MpiStatus(code, absl::StrCat("sending ", what, " to rank ", to)));
    }
    if (done) return absl::OkStatus();
    if (absl::Now() > deadline) {
      // MPI may still read `data` after this returns; the group is broken
      // and the job ends (MPI_Abort) before the caller reuses it for good.
      return Break(absl::UnavailableError(
          absl::StrCat("rank ", to, " of ", size_, " did not take ", what, " within ",
                       absl::FormatDuration(options_.timeout), ": it died or stopped answering")));
    }
    backoff.Wait();
  }
}

absl::StatusOr<std::string> MpiTrainingRanks::Receive(int from, int tag, int communicator,
                                                      const std::string& what) {
  REPLICAD_ASSIGN_OR_RETURN(size_t size, Probe(from, tag, communicator, what));
  std::string bytes(size, '\0');
  REPLICAD_RETURN_IF_ERROR(ReceiveProbed(from, tag, communicator, bytes.data(), size, what));
  return bytes;
}

absl::Status MpiTrainingRanks::ReceiveBytes(int from, int tag, int communicator, void* data,
                                            size_t size, const std::string& what) {
  REPLICAD_ASSIGN_OR_RETURN(size_t arrived, Probe(from, tag, communicator, what));
  if (arrived != size) {
    return Break(absl::InternalError(
        absl::StrCat("rank ", from, " sent ", arrived, " bytes for ", what, ", expected ", size)));
  }
  return ReceiveProbed(from, tag, communicator, data, size, what);
}

absl::Status MpiTrainingRanks::ReceiveProbed(int from, int tag, int communicator, void* data,
                                             size_t size, const std::string& what) {
  // The message is there: a blocking receive moves it at MPI's own pace.
  const int code = MPI_Recv(data, static_cast<int>(size), MPI_BYTE, from, tag,
                            communicators_->channels[communicator], MPI_STATUS_IGNORE);
  if (code != MPI_SUCCESS) {
    return Break(MpiStatus(code, absl::StrCat("receiving ", what, " from rank ", from)));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MpiTrainingRanks::Probe(int from, int tag, int communicator,
                                               const std::string& what) {
  MPI_Comm comm = communicators_->channels[communicator];
  const absl::Time deadline = absl::Now() + options_.timeout;
  PollBackoff backoff;
  MPI_Status status;
  for (;;) {
    int found = 0;
    const int code = MPI_Iprobe(from, tag, comm, &found, &status);
    if (code != MPI_SUCCESS) {
      return Break(MpiStatus(code, absl::StrCat("waiting for ", what, " from rank ", from)));
    }
    if (found) break;
    if (absl::Now() > deadline) {
      return Break(absl::UnavailableError(
          absl::StrCat("rank ", from, " of ", size_, " did not send ", what, " within ",
                       absl::FormatDuration(options_.timeout), ": it died or stopped answering")));
    }
    backoff.Wait();
  }
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  return static_cast<size_t>(count);
}

absl::Status MpiTrainingRanks::AwaitEveryRank() {
  return MpiStatus(MPI_Barrier(communicators_->channels[kCommands]), "MPI_Barrier");
}

absl::Status MpiTrainingRanks::SendCommand(const std::string& command) {
  for (int r = 1; r < size_; ++r) {
    REPLICAD_RETURN_IF_ERROR(SendCommandTo(r, command));
  }
  return absl::OkStatus();
}

absl::Status MpiTrainingRanks::SendCommandTo(int rank, const std::string& command) {
  REPLICAD_RETURN_IF_ERROR(broken());
  if (rank <= 0 || rank >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not another rank of ", size_));
  }
  return Send(rank, kCommandTag, command, kCommands, "a command");
}

absl::StatusOr<std::string> MpiTrainingRanks::ReceiveCommand(const std::atomic<bool>& stop) {
  MPI_Comm comm = communicators_->channels[kCommands];
  PollBackoff backoff(absl::Milliseconds(5));
  MPI_Status status;
  for (;;) {
    REPLICAD_RETURN_IF_ERROR(broken());
    if (stop.load()) return absl::CancelledError("stopping");
    int found = 0;
    const int code = MPI_Iprobe(0, kCommandTag, comm, &found, &status);
    if (code != MPI_SUCCESS) return Break(MpiStatus(code, "waiting for a command from rank 0"));
    if (found) break;
    backoff.Wait();
  }
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::string bytes(static_cast<size_t>(count), '\0');
  const int code = MPI_Recv(bytes.data(), count, MPI_BYTE, 0, kCommandTag, comm, MPI_STATUS_IGNORE);
  if (code != MPI_SUCCESS) return Break(MpiStatus(code, "receiving a command from rank 0"));
  return bytes;
}

absl::Status MpiTrainingRanks::SumStep(int64_t step, RankPartial* partial) {
  REPLICAD_RETURN_IF_ERROR(broken());
  const std::string which =
      step > 0 ? absl::StrCat("its part of step ", step) : "its part of a step";
  const std::string sums =
      step > 0 ? absl::StrCat("the sums of step ", step) : "the sums of a step";
  if (rank_ != 0) return SendPartForSums(which, sums, partial);
  return SumParts(which, partial);
}

absl::Status MpiTrainingRanks::SendPartForSums(const std::string& which, const std::string& sums,
                                               RankPartial* partial) {
  // The header, then each gradient from the trainer's own vector.
  REPLICAD_RETURN_IF_ERROR(Send(0, kPartialTag, EncodePartialHeader(*partial), kSteps, which));
  if (partial->status.ok()) {
    for (const std::vector<float>& g : partial->gradients) {
      REPLICAD_RETURN_IF_ERROR(
          SendBytes(0, kGradientTag, g.data(), g.size() * sizeof(float), kSteps, which));
    }
  }
  REPLICAD_ASSIGN_OR_RETURN(std::string reply, Receive(0, kSumTag, kSteps, sums));
  RankPartial job;
  std::vector<size_t> sizes;
  if (absl::Status s = DecodePartialHeader(reply, &job, &sizes); !s.ok()) return Break(s);
  if (!job.status.ok()) return job.status;
  if (sizes != SizesOf(partial->gradients)) {
    return Break(absl::InternalError(absl::StrCat("rank 0 sent ", sizes.size(),
                                                  " gradient sums unlike this rank's ",
                                                  partial->gradients.size())));
  }
  // The sums straight into the trainer's vectors.
  for (std::vector<float>& g : partial->gradients) {
    REPLICAD_RETURN_IF_ERROR(
        ReceiveBytes(0, kSumGradientTag, kSteps, g.data(), g.size() * sizeof(float), sums));
  }
  job.gradients = std::move(partial->gradients);
  *partial = std::move(job);
  return absl::OkStatus();
}

absl::Status MpiTrainingRanks::SumParts(const std::string& which, RankPartial* partial) {
  // Rank 0: everyone's parts, in rank order, each added as it arrives.
  RankPartial job = std::move(*partial);
  absl::Status first_error = job.status;
  const std::vector<size_t> mine = SizesOf(job.gradients);
  for (int r = 1; r < size_; ++r) {
    REPLICAD_RETURN_IF_ERROR(AddPartOf(r, which, mine, &job, &first_error));
  }
  job.status = first_error;
  const std::string reply = EncodePartialHeader(first_error.ok() ? job : Failed(first_error));
  for (int r = 1; r < size_; ++r) {
    REPLICAD_RETURN_IF_ERROR(Send(r, kSumTag, reply, kSteps, "a step's sums"));
    if (!first_error.ok()) continue;
    for (const std::vector<float>& sum : job.gradients) {
      REPLICAD_RETURN_IF_ERROR(SendBytes(r, kSumGradientTag, sum.data(), sum.size() * sizeof(float),
                                         kSteps, "a step's sums"));
    }
  }
  if (!first_error.ok()) return first_error;
  *partial = std::move(job);
  return absl::OkStatus();
}

absl::Status MpiTrainingRanks::AddPartOf(int r, const std::string& which,
                                         const std::vector<size_t>& mine, RankPartial* job,
                                         absl::Status* first_error) {
  absl::StatusOr<std::string> header = Receive(r, kPartialTag, kSteps, which);
  if (!header.ok()) {
    // The others wait for the answer: they get the failure.
    const std::string failed = EncodePartialHeader(Failed(header.status()));
    for (int other = 1; other < size_; ++other) {
      if (other != r) (void)Send(other, kSumTag, failed, kSteps, "a step's failure");
    }
    return header.status();
  }
  RankPartial part;
  std::vector<size_t> sizes;
  if (absl::Status s = DecodePartialHeader(*header, &part, &sizes); !s.ok()) return Break(s);
  // Every gradient announced is received, whatever this step's fate, so
  // that none is left to be taken for the next step's.
  const bool adds = first_error->ok() && part.status.ok() && sizes == mine;
  if (part.status.ok() && sizes != mine && first_error->ok()) {
    *first_error = absl::InternalError(
        absl::StrCat("rank ", r, " of ", size_, " sent gradients unlike rank 0's"));
  }
  REPLICAD_RETURN_IF_ERROR(ReceiveGradients(r, which, sizes, adds, job));
  if (!part.status.ok()) {
    if (first_error->ok()) {
      *first_error = absl::Status(
          part.status.code(), absl::StrCat("rank ", r, " of ", size_, ": ", part.status.message()));
    }
    return absl::OkStatus();
  }
  if (!adds) return absl::OkStatus();
  job->loss_sum += part.loss_sum;
  job->correct += part.correct;
  if (job->buffers.empty()) job->buffers = std::move(part.buffers);
  return absl::OkStatus();
}

absl::Status MpiTrainingRanks::ReceiveGradients(int r, const std::string& which,
                                                const std::vector<size_t>& sizes, bool adds,
                                                RankPartial* job) {
  if (scratch_.size() < sizes.size()) scratch_.resize(sizes.size());
  for (size_t p = 0; p < sizes.size(); ++p) {
    std::vector<float>& g = scratch_[p];
    g.resize(sizes[p]);
    REPLICAD_RETURN_IF_ERROR(
        ReceiveBytes(r, kGradientTag, kSteps, g.data(), g.size() * sizeof(float), which));
    if (!adds) continue;
    std::vector<float>& sum = job->gradients[p];
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += g[k];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> MpiTrainingRanks::ExchangeShardRows(int64_t step, int64_t rows,
                                                                         const absl::Status& local,
                                                                         uint64_t configuration) {
  REPLICAD_RETURN_IF_ERROR(broken());
  const std::string which = absl::StrCat("its shard of step ", step);
  FrameWriter mine;
  mine.Int64(step);
  mine.Int64(rows);
  mine.Int64(static_cast<int64_t>(configuration));
  mine.Status(local);
  if (rank_ != 0) {
    REPLICAD_RETURN_IF_ERROR(Send(0, kShardTag, mine.bytes(), kSteps, which));
    REPLICAD_ASSIGN_OR_RETURN(
        std::string reply,
        Receive(0, kShardPlanTag, kSteps, absl::StrCat("the shards of step ", step)));
    FrameReader in(reply);
    absl::StatusOr<absl::Status> status = in.Status("shard status");
    if (!status.ok()) return Break(status.status());
    if (!status->ok()) return *status;
    std::vector<int64_t> shards;
    for (int r = 0; r < size_; ++r) {
      absl::StatusOr<int64_t> n = in.Int64("shard rows");
      if (!n.ok()) return Break(n.status());
      shards.push_back(*n);
    }
    return shards;
  }
  // Rank 0: the first failure in rank order wins, then disagreements.
  std::vector<int64_t> shards = {rows};
  absl::Status agreed = local;
  for (int r = 1; r < size_; ++r) {
    REPLICAD_ASSIGN_OR_RETURN(std::string bytes, Receive(r, kShardTag, kSteps, which));
    FrameReader in(bytes);
    absl::StatusOr<int64_t> their_step = in.Int64("shard step");
    absl::StatusOr<int64_t> their_rows = in.Int64("shard rows");
    absl::StatusOr<int64_t> their_configuration = in.Int64("shard configuration");
    absl::StatusOr<absl::Status> their_status = in.Status("shard status");
    if (!their_status.ok()) return Break(their_status.status());
    shards.push_back(their_rows.ok() ? *their_rows : 0);
    if (!agreed.ok()) continue;
    if (!their_status->ok()) {
      agreed = absl::Status(their_status->code(),
                            absl::StrCat("rank ", r, " of ", size_, ": ", their_status->message()));
    } else if (*their_step != step) {
      agreed = absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " of ", size_, " was sent its shard of step ", *their_step,
          " and rank 0 of step ", step, ": every rank must be sent its shard of the same step"));
    } else if (static_cast<uint64_t>(*their_configuration) != configuration) {
      agreed = absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " of ", size_,
                       " trains with another configuration than rank 0: "
                       "ConfigureTraining every rank alike before their shards"));
    }
  }
  FrameWriter plan;
  plan.Status(agreed);
  for (int64_t n : shards) plan.Int64(n);
  for (int r = 1; r < size_; ++r) {
    REPLICAD_RETURN_IF_ERROR(Send(r, kShardPlanTag, plan.bytes(), kSteps, "the shards of a step"));
  }
  if (!agreed.ok()) return agreed;
  return shards;
}

absl::Status MpiTrainingRanks::SumStatistics(const std::vector<int>& ranks, double* data,
                                             size_t count) {
  REPLICAD_RETURN_IF_ERROR(broken());
  if (ranks.size() <= 1) return absl::OkStatus();
  const size_t bytes = count * sizeof(double);
  const int leader = ranks[0];
  const std::string what = "its batch-normalization statistics";
  if (rank_ != leader) {
    if (absl::Status s =
            Send(leader, kStatisticsTag, std::string(reinterpret_cast<const char*>(data), bytes),
                 kStatistics, what);
        !s.ok())
      return s;
    REPLICAD_ASSIGN_OR_RETURN(std::string sum, Receive(leader, kStatisticsSumTag, kStatistics,
                                                       "the batch-normalization sums"));
    if (sum.size() != bytes) {
      return Break(absl::InternalError(absl::StrCat("rank ", leader, " sent ", sum.size(),
                                                    " bytes of statistics, expected ", bytes)));
    }
    std::memcpy(data, sum.data(), bytes);
    return absl::OkStatus();
  }
  for (size_t i = 1; i < ranks.size(); ++i) {
    REPLICAD_ASSIGN_OR_RETURN(std::string part,
                              Receive(ranks[i], kStatisticsTag, kStatistics, what));
    if (part.size() != bytes) {
      return Break(absl::InternalError(absl::StrCat("rank ", ranks[i], " sent ", part.size(),
                                                    " bytes of statistics, expected ", bytes)));
    }
    const double* values = reinterpret_cast<const double*>(part.data());
    for (size_t k = 0; k < count; ++k) data[k] += values[k];
  }
  const std::string sum(reinterpret_cast<const char*>(data), bytes);
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (absl::Status s =
            Send(ranks[i], kStatisticsSumTag, sum, kStatistics, "the batch-normalization sums");
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MpiTrainingRanks::AllGather(const std::string& mine) {
  REPLICAD_RETURN_IF_ERROR(broken());
  const std::string what = "its part of a gather";
  if (rank_ != 0) {
    REPLICAD_RETURN_IF_ERROR(Send(0, kGatherTag, mine, kGathers, what));
    REPLICAD_ASSIGN_OR_RETURN(std::string reply,
                              Receive(0, kGatheredTag, kGathers, "every rank's parts"));
    FrameReader in(reply);
    std::vector<std::string> parts;
    for (int r = 0; r < size_; ++r) {
      absl::StatusOr<std::string> part = in.String("a rank's part");
      if (!part.ok()) return Break(part.status());
      parts.push_back(*std::move(part));
    }
    return parts;
  }
  std::vector<std::string> parts = {mine};
  FrameWriter all;
  all.String(mine);
  for (int r = 1; r < size_; ++r) {
    REPLICAD_ASSIGN_OR_RETURN(std::string part, Receive(r, kGatherTag, kGathers, what));
    all.String(part);
    parts.push_back(std::move(part));
  }
  for (int r = 1; r < size_; ++r) {
    REPLICAD_RETURN_IF_ERROR(Send(r, kGatheredTag, all.bytes(), kGathers, "every rank's parts"));
  }
  return parts;
}

}  // namespace replicad
