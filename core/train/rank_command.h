#ifndef REPLICAD_CORE_TRAIN_RANK_COMMAND_H_
#define REPLICAD_CORE_TRAIN_RANK_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor/tensor.h"
#include "core/train/training_config.h"

namespace replicad {

// What rank 0 hands the other ranks of a job to run as it does: a model's
// new training configuration, one step (the rows of rank 0's batch, which
// rank 0 checked, that the job's split gives the receiving rank), or the
// end of the job.
struct RankCommand {
  enum class Kind { kConfigure = 1, kStep = 2, kStop = 3 };
  Kind kind = Kind::kStop;
  std::string model;
  TrainingConfig config;       // kConfigure.
  std::vector<Tensor> inputs;  // kStep: host tensors in model input order.
  Tensor targets;              // kStep.
  // kStep: `inputs` and `targets` are rows [first_row, first_row + rows) of
  // rank 0's batch of `batch` rows.
  int64_t first_row = 0;
  int64_t batch = 0;
  uint64_t configuration = 0;  // kStep: rank 0's training configuration (its fingerprint).
};

std::string EncodeRankCommand(const RankCommand& command);
// InvalidArgument, naming what, for a frame that is cut short or malformed.
absl::StatusOr<RankCommand> DecodeRankCommand(absl::string_view bytes);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_RANK_COMMAND_H_
