#include "core/train/training_ranks.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/train/byte_frame.h"

namespace replicad {
namespace {

// One rank's part of GatherSlices, appended to `out`.
absl::Status ReadSlices(absl::string_view bytes, int rank, std::vector<RankSlice>* out) {
  FrameReader in(bytes);
  REPLICAD_ASSIGN_OR_RETURN(const int64_t count, in.Int64("slice count"));
  for (int64_t i = 0; i < count; ++i) {
    RankSlice slice;
    slice.rank = rank;
    REPLICAD_ASSIGN_OR_RETURN(slice.slot, in.String("slot"));
    REPLICAD_ASSIGN_OR_RETURN(slice.device, in.String("device"));
    REPLICAD_ASSIGN_OR_RETURN(slice.begin, in.Int64("begin"));
    REPLICAD_ASSIGN_OR_RETURN(slice.end, in.Int64("end"));
    REPLICAD_ASSIGN_OR_RETURN(slice.compute_seconds, in.Double("compute seconds"));
    out->push_back(std::move(slice));
  }
  if (!in.done())
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": bytes left over"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RankSlice>> GatherSlices(TrainingRanks& ranks,
                                                    const std::vector<RankSlice>& mine) {
  FrameWriter out;
  out.Int64(static_cast<int64_t>(mine.size()));
  for (const RankSlice& slice : mine) {
    out.String(slice.slot);
    out.String(slice.device);
    out.Int64(slice.begin);
    out.Int64(slice.end);
    out.Double(slice.compute_seconds);
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> every, ranks.AllGather(out.Take()));
  std::vector<RankSlice> slices;
  for (size_t r = 0; r < every.size(); ++r) {
    REPLICAD_RETURN_IF_ERROR(ReadSlices(every[r], static_cast<int>(r), &slices));
  }
  return slices;
}

absl::StatusOr<std::vector<std::string>> GatherReadiness(TrainingRanks& ranks,
                                                         const absl::Status& local,
                                                         const std::string& description) {
  // "<status code>:<message, or the description when OK>".
  const std::string mine =
      absl::StrCat(static_cast<int>(local.code()), ":", local.ok() ? description : local.message());
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> every, ranks.AllGather(mine));
  if (!local.ok()) return local;
  std::vector<std::string> descriptions;
  for (size_t r = 0; r < every.size(); ++r) {
    const std::string& part = every[r];
    const size_t colon = part.find(':');
    int code = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(part.substr(0, colon), &code)) {
      return absl::InternalError(absl::StrCat("rank ", r, " sent a malformed readiness"));
    }
    if (code != 0) {
      return absl::Status(static_cast<absl::StatusCode>(code),
                          absl::StrCat("rank ", r, " of ", every.size(), ": ",
                                       absl::string_view(part).substr(colon + 1)));
    }
    descriptions.push_back(part.substr(colon + 1));
  }
  return descriptions;
}

}  // namespace replicad
