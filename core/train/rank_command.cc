#include "core/train/rank_command.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/train/byte_frame.h"

namespace replicad {
namespace {

// More inputs than any model takes; a bound against a corrupt count.
constexpr int64_t kMaxInputs = 1024;

}  // namespace

std::string EncodeRankCommand(const RankCommand& command) {
  FrameWriter out;
  out.Int64(static_cast<int64_t>(command.kind));
  out.String(command.model);
  if (command.kind == RankCommand::Kind::kConfigure)
    out.String(FormatTrainingConfig(command.config));
  if (command.kind == RankCommand::Kind::kStep) {
    out.Int64(command.first_row);
    out.Int64(command.batch);
    out.Int64(static_cast<int64_t>(command.configuration));
    out.Int64(static_cast<int64_t>(command.inputs.size()));
    for (const Tensor& t : command.inputs) out.HostTensor(t);
    out.HostTensor(command.targets);
  }
  return out.Take();
}

absl::StatusOr<RankCommand> DecodeRankCommand(absl::string_view bytes) {
  FrameReader in(bytes);
  RankCommand command;
  absl::StatusOr<int64_t> kind = in.Int64("command kind");
  if (!kind.ok()) return kind.status();
  if (*kind < 1 || *kind > 3) {
    return absl::InvalidArgumentError(absl::StrCat("rank command: kind ", *kind));
  }
  command.kind = static_cast<RankCommand::Kind>(*kind);
  REPLICAD_ASSIGN_OR_RETURN(std::string model, in.String("model"));
  command.model = std::move(model);
  if (command.kind == RankCommand::Kind::kConfigure) {
    absl::StatusOr<std::string> config = in.String("config");
    if (!config.ok()) return config.status();
    absl::StatusOr<TrainingConfig> parsed = ParseTrainingConfig(*config);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("rank command: ", parsed.status().message()));
    }
    command.config = *std::move(parsed);
  }
  if (command.kind == RankCommand::Kind::kStep) {
    absl::StatusOr<int64_t> first_row = in.Int64("first row");
    if (!first_row.ok()) return first_row.status();
    absl::StatusOr<int64_t> batch = in.Int64("batch");
    if (!batch.ok()) return batch.status();
    if (*first_row < 0 || *batch < *first_row) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank command: rows from row ", *first_row, " of a batch of ", *batch));
    }
    command.first_row = *first_row;
    command.batch = *batch;
    absl::StatusOr<int64_t> configuration = in.Int64("configuration");
    if (!configuration.ok()) return configuration.status();
    command.configuration = static_cast<uint64_t>(*configuration);
    absl::StatusOr<int64_t> inputs = in.Int64("inputs");
    if (!inputs.ok()) return inputs.status();
    if (*inputs < 0 || *inputs > kMaxInputs) {
      return absl::InvalidArgumentError(absl::StrCat("rank command: ", *inputs, " inputs"));
    }
    for (int64_t i = 0; i < *inputs; ++i) {
      absl::StatusOr<Tensor> t = in.HostTensor("input");
      if (!t.ok()) return t.status();
      command.inputs.push_back(*std::move(t));
    }
    absl::StatusOr<Tensor> targets = in.HostTensor("targets");
    if (!targets.ok()) return targets.status();
    command.targets = *std::move(targets);
  }
  if (!in.done()) return absl::InvalidArgumentError("rank command: bytes left over");
  return command;
}

}  // namespace replicad
