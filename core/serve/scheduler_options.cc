#include "core/serve/scheduler_options.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/base/status_macros.h"

namespace replicad {

const QueuePolicy& SchedulerOptions::PolicyOf(uint32_t level) const {
  auto it = priority_queue_policy.find(level);
  return it != priority_queue_policy.end() ? it->second : default_queue_policy;
}

uint32_t SchedulerOptions::LevelOf(uint64_t priority) const {
  if (priority_levels == 0) return 1;
  if (priority == 0 || priority > priority_levels) {
    return default_priority_level == 0 ? 1 : default_priority_level;
  }
  return static_cast<uint32_t>(priority);
}

namespace {

absl::Status CheckPolicy(const std::string& field, const QueuePolicy& policy) {
  if (policy.default_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".default_timeout_microseconds: expected >= 0, received ",
                     absl::ToInt64Microseconds(policy.default_timeout)));
  }
  return absl::OkStatus();
}

// Each of `sizes` within 1..max_batch_size (any size from 1 without one);
// InvalidArgument naming `list`[i]`field`, e.g. "model_warmup[0].batch_size".
absl::Status CheckBatchSizes(const std::vector<int64_t>& sizes, int64_t max_batch_size,
                             absl::string_view list, absl::string_view field) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 0 || (max_batch_size > 0 && sizes[i] > max_batch_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          list, "[", i, "]", field, ": expected ",
          max_batch_size > 0 ? absl::StrCat("1..", max_batch_size, " (max_batch_size)") : ">= 1",
          ", received ", sizes[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SchedulerOptions::Validate() const {
  if (max_batch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size: expected >= 0, received ", max_batch_size));
  }
  REPLICAD_RETURN_IF_ERROR(CheckBatchSizes(preferred_batch_sizes, max_batch_size,
                                           "dynamic_batching.preferred_batch_size", ""));
  if (warmup_max_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup_max_rows: expected >= 1, received ", warmup_max_rows));
  }
  if (absl::Status s =
          CheckBatchSizes(warmup_batch_sizes, max_batch_size, "model_warmup", ".batch_size");
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < sequence_buckets.size(); ++i) {
    if (sequence_buckets[i] < 1 || sequence_buckets[i] > kMaxSequenceBucket ||
        (i > 0 && sequence_buckets[i] <= sequence_buckets[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameters.sequence_buckets: expected lengths 1..", kMaxSequenceBucket,
                       " in ascending order, received ", absl::StrJoin(sequence_buckets, ",")));
    }
  }
  if (max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching.max_queue_delay_microseconds: expected >= 0, received ",
                     absl::ToInt64Microseconds(max_queue_delay)));
  }
  if (priority_levels > 0 &&
      (default_priority_level < 1 || default_priority_level > priority_levels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching.default_priority_level: expected 1..", priority_levels,
                     " (priority_levels), received ", default_priority_level));
  }
  if (priority_levels == 0 && default_priority_level != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic_batching.default_priority_level: expected 0 without priority_levels, received ",
        default_priority_level));
  }
  REPLICAD_RETURN_IF_ERROR(
      CheckPolicy("dynamic_batching.default_queue_policy", default_queue_policy));
  for (const auto& [level, policy] : priority_queue_policy) {
    if (priority_levels == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dynamic_batching.priority_queue_policy: expected none without priority_levels, "
          "received level ",
          level));
    }
    if (level < 1 || level > priority_levels) {
      return absl::InvalidArgumentError(
          absl::StrCat("dynamic_batching.priority_queue_policy: expected levels 1..",
                       priority_levels, " (priority_levels), received ", level));
    }
    REPLICAD_RETURN_IF_ERROR(
        CheckPolicy(absl::StrCat("dynamic_batching.priority_queue_policy[", level, "]"), policy));
  }
  return absl::OkStatus();
}

}  // namespace replicad
