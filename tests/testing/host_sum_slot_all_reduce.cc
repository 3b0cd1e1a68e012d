#include "tests/testing/host_sum_slot_all_reduce.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace replicad::testing {
namespace {

class HostSumSlotAllReduce : public SlotAllReduce {
 public:
  HostSumSlotAllReduce(int participants, const SlotAllReducePeers* peers)
      : posted_(static_cast<size_t>(participants), nullptr) {
    if (peers != nullptr && peers->size > 1) peers_ = *peers;
  }

  absl::Status AllReduce(int participant, float* data, size_t count, float scale,
                         bool contributes) override {
    absl::MutexLock lock(&mu_);
    if (!contributes) std::memset(data, 0, count * sizeof(float));
    posted_[static_cast<size_t>(participant)] = data;
    const int64_t round = round_;
    if (++arrived_ < posted_.size()) {
      auto done = [this, round]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return round_ > round; };
      mu_.Await(absl::Condition(&done));
      return absl::OkStatus();
    }
    // The last participant of the round sums for all of them.
    std::vector<float> sum(posted_[0], posted_[0] + count);
    for (size_t m = 1; m < posted_.size(); ++m) {
      for (size_t k = 0; k < count; ++k) sum[k] += posted_[m][k];
    }
    if (peers_ && failure_.ok()) {
      absl::StatusOr<std::vector<std::string>> parts = peers_->all_gather(
          std::string(reinterpret_cast<const char*>(sum.data()), count * sizeof(float)));
      if (!parts.ok()) {
        failure_ = parts.status();
      } else {
        std::memcpy(sum.data(), (*parts)[0].data(), count * sizeof(float));
        for (size_t r = 1; r < parts->size(); ++r) {
          if ((*parts)[r].size() != count * sizeof(float)) {
            failure_ = absl::InternalError(absl::StrCat("rank ", r, " sent ", (*parts)[r].size(),
                                                        " bytes for ", count, " floats"));
            break;
          }
          const float* theirs = reinterpret_cast<const float*>((*parts)[r].data());
          for (size_t k = 0; k < count; ++k) sum[k] += theirs[k];
        }
      }
    }
    for (float& v : sum) v *= scale;
    for (float* out : posted_) std::memcpy(out, sum.data(), count * sizeof(float));
    arrived_ = 0;
    ++round_;
    return absl::OkStatus();
  }

  absl::Status Join(int) override {
    absl::MutexLock lock(&mu_);
    const absl::Status failure = failure_;
    if (++joined_ == posted_.size()) {
      joined_ = 0;
      failure_ = absl::OkStatus();
    }
    return failure;
  }

 private:
  std::optional<SlotAllReducePeers> peers_;
  absl::Mutex mu_;
  std::vector<float*> posted_ ABSL_GUARDED_BY(mu_);
  size_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  size_t joined_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<SlotAllReduce> MakeHostSumSlotAllReduce(int participants,
                                                        const SlotAllReducePeers* peers) {
  return std::make_unique<HostSumSlotAllReduce>(participants, peers);
}

}  // namespace replicad::testing
