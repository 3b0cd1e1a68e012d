#ifndef REPLICAD_CORE_TRAIN_TRAINING_RANKS_H_
#define REPLICAD_CORE_TRAIN_TRAINING_RANKS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor/tensor.h"

namespace replicad {

// What one rank (process) of a training job brings to a step's reduction:
// its slots' sums, in slot order, before any scaling.
struct RankPartial {
  // Not OK: this rank's part of the step failed (its slots, or the command
  // before the trainer); the others then discard the step. The fields below
  // are then ignored.
  absl::Status status;
  double loss_sum = 0;  // Of its rows' losses.
  double correct = 0;   // Its rows classified right (classification losses).
  // Per parameter, the sum over its slots of their rows' gradients (zeros
  // when the rank ran no rows). Empty only with a failed status.
  std::vector<std::vector<float>> gradients;
  // Running statistics after the step, from the rank running the batch's
  // first row (with SyncBatchNorm every rank computed the same; without, the
  // first slot's are kept, as within a process). Other ranks leave it empty.
  std::vector<Tensor> buffers;
};

// The other processes of a training job (launched by mpirun, srun or an
// MPIJob), as the trainer sees them: the job's slots are every rank's
// slots, rank by rank, and a batch is split over them all by one rule, so
// N ranks train like one process holding all those slots. Implemented over
// MPI by the server (server/ranks/mpi_training_ranks.h); core never includes MPI.
//
// Every rank makes the same sequence of calls for the same steps. A rank
// that fails, dies or stops answering fails the step on every rank within
// the implementation's bound, with Unavailable naming the rank; after such
// a failure the group is broken and every later call fails at once (the
// job then exits, for its launcher to restart it from a checkpoint).
class TrainingRanks {
 public:
  virtual ~TrainingRanks() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every slot of the job, rank by rank in slot order: its weight in the
  // global split (this rank's own slots are among them) and its rank.
  virtual const std::vector<double>& slot_weights() const = 0;
  virtual const std::vector<int>& slot_ranks() const = 0;

  // Sums `partial` over the ranks in rank order (rank 0's plus rank 1's,
  // ..., so one rank of N slots and N ranks of one slot add alike) and
  // replaces it with the job's: loss_sum, correct and gradients summed,
  // buffers those of the rank running the first row. Fails when any rank's
  // partial failed (that rank's error, naming it) or a rank does not answer
  // in time (Unavailable). Every rank gets the same bits or the same error.
  virtual absl::Status SumStep(int64_t step, RankPartial* partial) = 0;

  // Per-rank shards (each rank steps on its own rows): every rank's row
  // count for `step`, in rank order, so that each knows the job's batch and
  // where its rows sit in it. `local` not OK: this rank's shard failed
  // (the others fail with it, its error prefixed "rank R of N: ");
  // `configuration` identifies the rank's training configuration. Fails
  // FailedPrecondition, naming the ranks, when they are not all at the same
  // step or configured alike; as SumStep does otherwise. Every rank gets the
  // same answer.
  virtual absl::StatusOr<std::vector<int64_t>> ExchangeShardRows(int64_t step, int64_t rows,
                                                                 const absl::Status& local,
                                                                 uint64_t configuration) = 0;

  // SyncBatchNorm: replaces data[0..count) with its sum over the ranks in
  // `ranks` (ascending; this rank among them), in rank order. Called by the
  // ranks that run rows in this step, in the same order and with the same
  // counts. Fails as SumStep does.
  virtual absl::Status SumStatistics(const std::vector<int>& ranks, double* data, size_t count) = 0;

  // Every rank's `mine`, in rank order (GPU slots' reduction agrees with it
  // on how to reach the other ranks: SlotAllReducePeers). Fails as SumStep
  // does.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) = 0;

  // The job can no longer train (its GPUs' communicator across the ranks
  // failed, and cannot be made again in the middle of a job): breaks the
  // group as a rank that stops answering does, with `why`.
  virtual void Abandon(const absl::Status& why) = 0;

  // How long a rank waits for the others before it gives up on them.
  virtual absl::Duration timeout() const = 0;
};

// A slice of a step one rank ran: its slot, in the batch's rows.
struct RankSlice {
  int rank = 0;
  std::string slot, device;
  int64_t begin = 0, end = 0;
  double compute_seconds = 0;  // Forward and backward.
};

// Every rank's `mine`, in rank order, through one AllGather; fails as
// AllGather does, or InvalidArgument for a part that does not decode.
absl::StatusOr<std::vector<RankSlice>> GatherSlices(TrainingRanks& ranks,
                                                    const std::vector<RankSlice>& mine);

// The first exchange of every step on every rank (after the shards' row
// counts, ExchangeShardRows, in a job of shards): whether each rank is
// ready to run its part (`local`: its checks and plans, or why not) and,
// if it is, its `description` (what the ranks must share, compared by the
// caller). Every rank's descriptions in rank order when every rank is
// ready; otherwise the first failure in rank order (this rank's own as it
// is, another's prefixed "rank R of N: "), the same on every rank, and the
// step ends there on every rank. A rank that fails before it can describe
// itself calls it all the same, or the others would wait for it.
absl::StatusOr<std::vector<std::string>> GatherReadiness(TrainingRanks& ranks,
                                                         const absl::Status& local,
                                                         const std::string& description);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_RANKS_H_
