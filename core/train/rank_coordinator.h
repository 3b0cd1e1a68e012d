#ifndef REPLICAD_CORE_TRAIN_RANK_COORDINATOR_H_
#define REPLICAD_CORE_TRAIN_RANK_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/slot_all_reduce.h"
#include "core/model/graph.h"
#include "core/train/training_graph.h"
#include "core/train/training_ranks.h"

namespace replicad {

// The rows a DataParallelTrainer step is given (data_parallel_trainer.h):
// the whole batch (Step), this rank's part of rank 0's batch (StepRows),
// or this rank's shard of the job's step (StepShard).
struct WholeBatch {};
struct RankPart {
  int64_t first_row = 0;  // The batch's index of the part's first row.
  int64_t batch = 0;      // Rank 0's batch, in rows.
};
struct Shard {
  int64_t step = 1;            // The job's step the shard belongs to.
  uint64_t configuration = 0;  // Of the rank's training, for the ranks to compare.
};
using StepMode = std::variant<WholeBatch, RankPart, Shard>;

// What a trainer does with the other ranks of its job (TrainingRanks):
// checks that they are ready and alike before a step, tells each where its
// rows sit, and sums what the host summed across them. Every call is one
// exchange that every rank makes in the same order (training_ranks.h); the
// failures are TrainingRanks' and the same on every rank. Not thread-safe:
// the trainer's lock guards it.
class RankCoordinator {
 public:
  // For a trainer of `slot_count` slots starting from `source`'s weights of
  // `training`. InvalidArgument when the job does not list `slot_count`
  // slots for this rank.
  static absl::StatusOr<std::unique_ptr<RankCoordinator>> Create(
      std::shared_ptr<TrainingRanks> ranks, size_t slot_count, const TrainingGraph& training,
      const Graph& source);

  TrainingRanks& ranks() const { return *ranks_; }
  // The job's index of this rank's first slot.
  int first_slot() const { return first_slot_; }
  // How the GPU slots' reduction reaches the other ranks.
  SlotAllReducePeers Peers() const;
  // The rows [first, end) of a batch of `batch` rows that the job's split
  // gives `rank`'s slots (first == end: none).
  std::pair<int64_t, int64_t> RowsOfRank(int64_t batch, int rank) const;

  // A job of shards: every rank's row count for `shard` (`rows` and `valid`:
  // this rank's), fails as ExchangeShardRows does.
  struct ShardPlace {
    int64_t batch = 0;                 // The job's: every rank's shard.
    int64_t first_row = 0;             // The job's index of this shard's row 0.
    std::vector<int> ranks_with_rows;  // Ascending.
  };
  absl::StatusOr<ShardPlace> ExchangeShards(const Shard& shard, int64_t rows,
                                            const absl::Status& valid);
  // GatherReadiness with what the ranks must share: the reduction's `kind`,
  // the weights they started from and the step count `step`.
  // FailedPrecondition naming the first rank that differs.
  absl::Status AwaitReady(const absl::Status& local, const char* kind, int64_t step);
  // SumStep of step `step`: the job's loss, correct count, host sums
  // (`gradients`, null where the devices sum; sized to `sizes` again after a
  // failure) and running statistics replace this rank's.
  absl::Status SumStep(int64_t step, double* loss, double* correct,
                       std::vector<std::vector<float>>* gradients, std::vector<Tensor>* running,
                       const std::vector<int64_t>& sizes);
  // A step that ended after every rank was ready but before its SumStep:
  // sums `why` (Internal where OK) so the other ranks do not wait; the
  // status the step then fails with.
  absl::Status SumFailedStep(int64_t step, const absl::Status& why);

 private:
  RankCoordinator(std::shared_ptr<TrainingRanks> ranks, int first_slot,
                  std::string starting_weights);
  absl::Status CheckRanksAlike(const std::vector<std::string>& every) const;

  const std::shared_ptr<TrainingRanks> ranks_;
  const int first_slot_;
  const std::string starting_weights_;  // A fingerprint of the weights it started from.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_RANK_COORDINATOR_H_
