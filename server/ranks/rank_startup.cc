#include "server/ranks/rank_startup.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.h"
#include "server/grpc/unix_socket_address.h"
#include "server/ranks/rank_worker.h"
#if REPLICAD_WITH_MPI
#include "server/ranks/mpi_training_ranks.h"
#endif

namespace replicad {

absl::StatusOr<std::shared_ptr<RankJob>> JoinRankJob(const ServerOptions& options,
                                                     const ServingOptions& serving) {
#if REPLICAD_WITH_MPI
  if (!MpiTrainingRanks::LaunchedByMpi()) return nullptr;
  std::vector<double> weights;
  for (const SlotAssignment& slot : serving.slots) weights.push_back(slot.weight);
  MpiTrainingRanks::Options rank_options;
  rank_options.timeout = absl::Seconds(options.rank_timeout_seconds);
  rank_options.on_broken = [](const absl::Status& status) {
    LogError(status.message());
    ::kill(::getpid(), SIGTERM);  // Ends the sigwait in Serve: the daemon stops.
  };
  absl::StatusOr<std::shared_ptr<MpiTrainingRanks>> ranks =
      MpiTrainingRanks::Create(weights, std::move(rank_options));
  if (!ranks.ok()) return ranks.status();
  LogInfo(absl::StrCat("rank ", (*ranks)->rank(), " of ", (*ranks)->size(), " (pid ", ::getpid(),
                       "), ", (*ranks)->slot_weights().size(), " slots in the job"));
  return std::shared_ptr<RankJob>(*std::move(ranks));
#else
  (void)options;
  (void)serving;
  return nullptr;
#endif
}

RankWorkerThread::RankWorkerThread(RankJob& job, ModelManager& models)
    : job_(job), thread_([this, &models] {
        ended_ = RunRankWorker(job_, models, stop_);
        if (!stop_.load()) ::kill(::getpid(), SIGTERM);  // Ends the daemon's sigwait.
      }) {}

int RankWorkerThread::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  const int rank = job_.training_ranks()->rank();
  if (ended_.ok() || absl::IsCancelled(ended_)) return 0;
  LogError(absl::StrCat("rank ", rank, ": ", ended_.message()));
  return kRankGroupBroken;
}

void OffsetListenPorts(ServerOptions* options, int rank) {
  if (IsUnixSocketAddress(options->listen)) absl::StrAppend(&options->listen, ".", rank);
  for (std::string* address : {&options->listen, &options->http_listen, &options->metrics_listen}) {
    if (IsUnixSocketAddress(*address)) continue;
    const size_t colon = address->rfind(':');
    int port = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(address->substr(colon + 1), &port) ||
        port == 0) {
      continue;
    }
    *address = absl::StrCat(address->substr(0, colon + 1), port + rank);
  }
}

}  // namespace replicad
