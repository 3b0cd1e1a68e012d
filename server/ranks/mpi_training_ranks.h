#ifndef REPLICAD_SERVER_RANKS_MPI_TRAINING_RANKS_H_
#define REPLICAD_SERVER_RANKS_MPI_TRAINING_RANKS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/train/rank_job.h"
#include "core/train/training_ranks.h"

namespace replicad {

// The ranks of a training job started by an MPI launcher (mpirun, srun
// --mpi=pmix, an MPIJob), over Open MPI. Rank 0 leads: it receives the
// job's requests and sends every other rank the commands it runs
// (SendCommand/ReceiveCommand); each step's sums gather at rank 0, which
// adds them in rank order and sends the result back (one rank of N slots
// and N ranks of one slot add alike, bit for bit, and rank 0 learns which
// rank is missing: MPI_Allreduce would hang without naming it).
//
// Every wait is bounded by `timeout`: a rank that dies or stops answering
// fails the call with Unavailable naming it, the group is then broken
// (every later call fails at once with that error) and `on_broken` runs
// once, on the failing thread: the daemon then exits non-zero so that the
// launcher can restart the job from its last checkpoint. Thread-safe.
class MpiTrainingRanks final : public TrainingRanks,
                               public RankJob,
                               public std::enable_shared_from_this<MpiTrainingRanks> {
 public:
  struct Options {
    absl::Duration timeout = absl::Seconds(60);
    std::function<void(const absl::Status&)> on_broken;
  };

  // Whether this process was started by an MPI launcher (its environment
  // names a rank), before anything initialises MPI.
  static bool LaunchedByMpi();

  // Initialises MPI (MPI_THREAD_MULTIPLE; FailedPrecondition without it)
  // and exchanges every rank's slot weights (`local_weights`, this rank's
  // slots in order). Once per process. Destroying it finalises MPI, or,
  // once the group is broken, aborts the job (MPI_Abort, status 75) so that
  // the launcher ends and reports it.
  static absl::StatusOr<std::shared_ptr<MpiTrainingRanks>> Create(
      const std::vector<double>& local_weights, Options options);
  ~MpiTrainingRanks() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<double>& slot_weights() const override { return slot_weights_; }
  const std::vector<int>& slot_ranks() const override { return slot_ranks_; }
  absl::Status SumStep(int64_t step, RankPartial* partial) override;
  absl::Status SumStatistics(const std::vector<int>& ranks, double* data, size_t count) override;
  absl::StatusOr<std::vector<int64_t>> ExchangeShardRows(int64_t step, int64_t rows,
                                                         const absl::Status& local,
                                                         uint64_t configuration) override;
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override;
  void Abandon(const absl::Status& why) override { (void)Break(why); }
  absl::Duration timeout() const override { return options_.timeout; }

  // RankJob. An idle rank waits for commands as long as it takes.
  std::shared_ptr<TrainingRanks> training_ranks() override { return shared_from_this(); }
  bool leads() const override { return rank_ == 0; }
  absl::Status AwaitEveryRank() override;
  absl::Status SendCommand(const std::string& command) override;
  absl::Status SendCommandTo(int rank, const std::string& command) override;
  absl::Mutex& command_order() override { return command_order_; }
  absl::StatusOr<std::string> ReceiveCommand(const std::atomic<bool>& stop) override;
  // OK, or why the group broke.
  absl::Status broken() const;

 private:
  struct Communicators;
  MpiTrainingRanks(Options options, int rank, int size);
  // Marks the group broken with `status` (the first one stays) and returns it.
  absl::Status Break(absl::Status status);
  // Point-to-point with a deadline; `what` names the message in errors.
  absl::Status Send(int to, int tag, const std::string& bytes, int communicator,
                    const std::string& what);
  absl::Status SendBytes(int to, int tag, const void* data, size_t size, int communicator,
                         const std::string& what);
  absl::StatusOr<std::string> Receive(int from, int tag, int communicator, const std::string& what);
  // Into `data`, which the message must fill exactly (Internal otherwise).
  absl::Status ReceiveBytes(int from, int tag, int communicator, void* data, size_t size,
                            const std::string& what);
  // Waits for the next such message; its size.
  absl::StatusOr<size_t> Probe(int from, int tag, int communicator, const std::string& what);
  absl::Status ReceiveProbed(int from, int tag, int communicator, void* data, size_t size,
                             const std::string& what);
  // SumStep's halves: another rank sends its part and receives the sums;
  // rank 0 adds every rank's part (AddPartOf, its gradients through
  // ReceiveGradients, added where `adds`) and sends the sums back.
  absl::Status SendPartForSums(const std::string& which, const std::string& sums,
                               RankPartial* partial);
  absl::Status SumParts(const std::string& which, RankPartial* partial);
  // Rank `r`'s part into `job`, or its failure into `first_error` (the
  // first one stays); a non-OK return ends the step.
  absl::Status AddPartOf(int r, const std::string& which, const std::vector<size_t>& mine,
                         RankPartial* job, absl::Status* first_error);
  absl::Status ReceiveGradients(int r, const std::string& which, const std::vector<size_t>& sizes,
                                bool adds, RankPartial* job);

  const Options options_;
  const int rank_;
  const int size_;
  std::vector<double> slot_weights_;
  std::vector<int> slot_ranks_;
  std::unique_ptr<Communicators> communicators_;
  // Rank 0: where another rank's gradients land before they are added
  // (kept, so that steps do not fault fresh pages in). SumStep runs one at a
  // time (a step's callers hold the job's order).
  std::vector<std::vector<float>> scratch_;
  absl::Mutex command_order_;
  mutable absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_RANKS_MPI_TRAINING_RANKS_H_
