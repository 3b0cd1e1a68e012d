#include "core/train/rank_coordinator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/status_macros.h"
#include "core/device/batch_split.h"

namespace replicad {
namespace {

// The ranks compare it at every step (CheckRanksAlike).
std::string FingerprintOfWeights(const TrainingGraph& training, const Graph& source) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, a 64-bit word at a time.
  auto add = [&hash](const Tensor& t) {
    const unsigned char* bytes = static_cast<const unsigned char*>(t.raw_data());
    const size_t size = t.byte_size();
    for (size_t i = 0; i < size; i += 8) {
      uint64_t word = 0;
      std::memcpy(&word, bytes + i, std::min<size_t>(8, size - i));
      hash = (hash ^ word) * 1099511628211ull;
    }
  };
  for (int v : training.parameters) add(source.initializers.at(v));
  for (int v : training.buffers) add(source.initializers.at(v));
  return absl::StrCat(absl::Hex(hash, absl::kZeroPad16));
}

}  // namespace

RankCoordinator::RankCoordinator(std::shared_ptr<TrainingRanks> ranks, int first_slot,
                                 std::string starting_weights)
    : ranks_(std::move(ranks)),
      first_slot_(first_slot),
      starting_weights_(std::move(starting_weights)) {}

absl::StatusOr<std::unique_ptr<RankCoordinator>> RankCoordinator::Create(
    std::shared_ptr<TrainingRanks> ranks, size_t slot_count, const TrainingGraph& training,
    const Graph& source) {
  const std::vector<int>& slot_ranks = ranks->slot_ranks();
  const auto mine = std::find(slot_ranks.begin(), slot_ranks.end(), ranks->rank());
  const int64_t count = std::count(slot_ranks.begin(), slot_ranks.end(), ranks->rank());
  if (ranks->slot_weights().size() != slot_ranks.size() ||
      count != static_cast<int64_t>(slot_count)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", ranks->rank(), " trains ", slot_count,
                                                   " slots, but the job lists ", count,
                                                   " for it among ", slot_ranks.size()));
  }
  const int first_slot = static_cast<int>(mine - slot_ranks.begin());
  return std::unique_ptr<RankCoordinator>(
      new RankCoordinator(std::move(ranks), first_slot, FingerprintOfWeights(training, source)));
}

SlotAllReducePeers RankCoordinator::Peers() const {
  // The GPU slots' reduction agrees with the other ranks on how to reach
  // each other through the ranks' own channel.
  TrainingRanks* job = ranks_.get();
  SlotAllReducePeers peers;
  peers.rank = job->rank();
  peers.size = job->size();
  peers.timeout = job->timeout();
  peers.all_gather = [job](const std::string& mine) { return job->AllGather(mine); };
  peers.break_group = [job](const absl::Status& why) { job->Abandon(why); };
  return peers;
}

std::pair<int64_t, int64_t> RankCoordinator::RowsOfRank(int64_t batch, int rank) const {
  std::pair<int64_t, int64_t> rows{0, 0};
  bool found = false;
  for (const BatchSlice& slice : SplitBatch(batch, ranks_->slot_weights())) {
    if (ranks_->slot_ranks()[slice.slot] != rank) continue;
    if (!found) rows.first = slice.begin;
    found = true;
    rows.second = slice.end;
  }
  return rows;
}

absl::StatusOr<RankCoordinator::ShardPlace> RankCoordinator::ExchangeShards(
    const Shard& shard, int64_t rows, const absl::Status& valid) {
  // Every rank's shard, in rank order, is the job's batch; this rank
  // splits its own over its slots.
  REPLICAD_ASSIGN_OR_RETURN(
      std::vector<int64_t> shards,
      ranks_->ExchangeShardRows(shard.step, valid.ok() ? rows : 0, valid, shard.configuration));
  ShardPlace place;
  for (int r = 0; r < static_cast<int>(shards.size()); ++r) {
    if (r < ranks_->rank()) place.first_row += (shards)[r];
    place.batch += shards[r];
    if ((shards)[r] > 0) place.ranks_with_rows.push_back(r);
  }
  return place;
}

absl::Status RankCoordinator::AwaitReady(const absl::Status& local, const char* kind,
                                         int64_t step) {
  REPLICAD_ASSIGN_OR_RETURN(
      std::vector<std::string> every,
      GatherReadiness(*ranks_, local, absl::StrCat(kind, "\n", starting_weights_, "\n", step)));
  return CheckRanksAlike(every);
}

absl::Status RankCoordinator::CheckRanksAlike(const std::vector<std::string>& every) const {
  // A rank on CPU slots sums on the host while one on GPUs waits in NCCL:
  // each would wait for the other until the timeout broke the job. Ranks
  // started from other weights or at other steps (another model or
  // checkpoint) would train on, their copies apart, unnoticed.
  const std::vector<std::string> first = absl::StrSplit(every[0], '\n');
  for (size_t r = 0; r < every.size(); ++r) {
    const std::vector<std::string> theirs = absl::StrSplit(every[r], '\n');
    if (theirs.size() != 3 || first.size() != 3) {
      return absl::InternalError(absl::StrCat("rank ", r, " sent a malformed description"));
    }
    const std::string rank = absl::StrCat("rank ", r, " of ", every.size());
    if (theirs[0] != first[0]) {
      return absl::FailedPreconditionError(absl::StrCat(
          rank, " sums its gradients on ", theirs[0], " and rank 0 on ", first[0],
          ": every rank of a job must train on the same kind of slots (give each rank the same "
          "--devices)"));
    }
    if (theirs[1] != first[1]) {
      return absl::FailedPreconditionError(
          absl::StrCat(rank,
                       " starts from other weights than rank 0 (another model or checkpoint): "
                       "every rank of a job must load the same"));
    }
    if (theirs[2] != first[2]) {
      return absl::FailedPreconditionError(
          absl::StrCat(rank, " is at step ", theirs[2], " and rank 0 at step ", first[2],
                       ": every rank of a job must resume from the same checkpoint"));
    }
  }
  return absl::OkStatus();
}

absl::Status RankCoordinator::SumStep(int64_t step, double* loss, double* correct,
                                      std::vector<std::vector<float>>* gradients,
                                      std::vector<Tensor>* running,
                                      const std::vector<int64_t>& sizes) {
  // Over the ranks, in rank order: the job's sums on every rank.
  RankPartial partial;
  partial.loss_sum = *loss;
  partial.correct = *correct;
  if (gradients != nullptr) partial.gradients = std::move(*gradients);
  partial.buffers = std::move(*running);
  absl::Status across = ranks_->SumStep(step, &partial);
  if (gradients != nullptr) *gradients = std::move(partial.gradients);
  if (!across.ok()) {
    if (gradients != nullptr) {
      // Sized again for the next step (a failed sum may leave them empty).
      gradients->clear();
      for (int64_t size : sizes) gradients->emplace_back(static_cast<size_t>(size));
    }
    return across;
  }
  *loss = partial.loss_sum;
  *correct = partial.correct;
  *running = std::move(partial.buffers);
  return absl::OkStatus();
}

absl::Status RankCoordinator::SumFailedStep(int64_t step, const absl::Status& why) {
  // Once every rank was ready, every rank sums once a step, or the others
  // would wait for this one: its failure fails the step everywhere.
  RankPartial failed;
  failed.status = why.ok() ? absl::InternalError("the step ended before its reduction") : why;
  (void)ranks_->SumStep(step, &failed);
  return failed.status;
}

}  // namespace replicad
