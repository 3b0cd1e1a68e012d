#ifndef REPLICAD_SERVER_RANKS_RANK_STARTUP_H_
#define REPLICAD_SERVER_RANKS_RANK_STARTUP_H_

#include <signal.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/serve/model_manager.h"
#include "core/train/rank_job.h"
#include "server/replica_set_factory.h"
#include "server/server_options.h"

namespace replicad {

// How a daemon started by mpirun or srun joins its training job, and how a
// rank that does not answer clients lives. Only this file and main.cc know
// whether MPI was built in (REPLICAD_WITH_MPI).

// The exit status of a rank whose training group broke (a rank died or
// stopped answering): EX_TEMPFAIL, "try again", for the launcher to restart
// the job from its last checkpoint.
inline constexpr int kRankGroupBroken = 75;

// Started by mpirun or srun (and built with MPI): this process's part in the
// training job, with every rank's slot weights exchanged; null otherwise.
// A group that breaks later logs why and sends this process SIGTERM.
absl::StatusOr<std::shared_ptr<RankJob>> JoinRankJob(const ServerOptions& options,
                                                     const ServingOptions& serving);

// A rank other than 0 runs rank 0's commands on a thread of its own until
// rank 0 ends the job, the group breaks (either sends this process SIGTERM,
// as a signal would) or Stop.
class RankWorkerThread {
 public:
  RankWorkerThread(RankJob& job, ModelManager& models);
  ~RankWorkerThread() { Stop(); }
  // Joins the thread. The exit status: 0, or kRankGroupBroken when the group
  // broke (logged).
  int Stop();

 private:
  RankJob& job_;
  std::atomic<bool> stop_{false};
  absl::Status ended_;
  std::thread thread_;
};

// Rank R of a job whose ranks all serve listens on each port plus R (port
// 0, any free port, stays 0), and on a Unix socket path with ".R" appended,
// so that ranks on one host do not collide.
void OffsetListenPorts(ServerOptions* options, int rank);

}  // namespace replicad

#endif  // REPLICAD_SERVER_RANKS_RANK_STARTUP_H_
