#ifndef REPLICAD_SERVER_RANKS_RANK_WORKER_H_
#define REPLICAD_SERVER_RANKS_RANK_WORKER_H_

#include <atomic>

#include "absl/status/status.h"
#include "core/serve/model_manager.h"
#include "core/train/rank_job.h"

namespace replicad {

// A rank other than 0: runs rank 0's commands (rank_command.h) on its own
// models, one at a time in the order sent, until rank 0 ends the job (OK),
// `stop` is set (Cancelled) or the group breaks (its Unavailable). A
// command naming a model this rank lacks fails that step on every rank.
absl::Status RunRankWorker(RankJob& job, ModelManager& models, const std::atomic<bool>& stop);

}  // namespace replicad

#endif  // REPLICAD_SERVER_RANKS_RANK_WORKER_H_
