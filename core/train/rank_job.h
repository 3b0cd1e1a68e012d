#ifndef REPLICAD_CORE_TRAIN_RANK_JOB_H_
#define REPLICAD_CORE_TRAIN_RANK_JOB_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/train/training_ranks.h"

namespace replicad {

// A training job of several ranks, as the daemon's training takes part in
// it: rank 0 answers the clients and hands each training command to the
// other ranks, which run them in the order sent (server/ranks/rank_worker.h).
// Implemented over MPI (server/ranks/mpi_training_ranks.h). Thread-safe.
class RankJob {
 public:
  virtual ~RankJob() = default;

  // The ranks' sums, for the trainers.
  virtual std::shared_ptr<TrainingRanks> training_ranks() = 0;
  virtual bool leads() const = 0;  // Rank 0.
  // Returns once every rank has called it (after loading its models, so
  // that rank 0's first command finds them ready). Waits as long as it
  // takes: a rank that fails to start ends the job through its launcher.
  virtual absl::Status AwaitEveryRank() = 0;

  // Rank 0, holding command_order() from sending a step until that step
  // has summed: hands the encoded command (rank_command.h) to every other
  // rank. Fails Unavailable naming a rank that does not take it in time.
  virtual absl::Status SendCommand(const std::string& command) = 0;
  // Rank 0, as SendCommand: hands `rank` alone its command (a step's rows differ by rank).
  virtual absl::Status SendCommandTo(int rank, const std::string& command) = 0;
  virtual absl::Mutex& command_order() = 0;
  // Other ranks: the next command; Cancelled once `stop` is set.
  virtual absl::StatusOr<std::string> ReceiveCommand(const std::atomic<bool>& stop) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_RANK_JOB_H_
