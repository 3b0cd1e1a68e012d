// Gradient reduction across CUDA slots. Slots on one GPU form a group whose
// first slot leads: the others post their buffers, the leader sums them into
// its own on the device (in slot order), runs the NCCL all-reduce across the
// groups' leaders (one communicator per GPU, made once), scales, and the
// others copy the result back. Everything runs on one side stream per slot,
// ordered after the slot's work through events, so a bucket's reduction
// overlaps the rest of the backward pass until Join.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/cuda_slot.h"
#include "core/backends/cuda/slot_reduce_launch.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Makes `ordinal` the calling thread's GPU until destroyed (creation and
// teardown run on the caller's thread, not the slots').
class ScopedGpu {
 public:
  explicit ScopedGpu(int ordinal) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    cudaSetDevice(ordinal);
  }
  ~ScopedGpu() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

class NcclAllReduce : public SlotAllReduce {
 public:
  ~NcclAllReduce() override {
    for (Participant& p : participants_) {
      ScopedGpu gpu(p.ordinal);
      if (p.side != nullptr) cudaStreamSynchronize(p.side);
      if (p.issued != nullptr) cudaEventDestroy(p.issued);
      if (p.reduced != nullptr) cudaEventDestroy(p.reduced);
      if (p.ready != nullptr) cudaEventDestroy(p.ready);
      if (p.side != nullptr) cudaStreamDestroy(p.side);
    }
    for (auto& group : groups_) {
      ScopedGpu gpu(group->ordinal);
      if (group->leader_done != nullptr) cudaEventDestroy(group->leader_done);
      if (group->comm != nullptr) ncclCommDestroy(group->comm);
    }
  }

  absl::Status Init(const std::vector<Device*>& slots) {
    std::map<int, int> group_of_ordinal;
    for (size_t i = 0; i < slots.size(); ++i) {
      Participant p;
      p.name = DeviceIdToString(slots[i]->info().id);
      p.ordinal = slots[i]->info().id.ordinal;
      p.stream = CudaSlotStream(*slots[i]);
      if (p.stream == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(p.name, ": not a slot of the CUDA backend"));
      }
      auto [it, added] = group_of_ordinal.emplace(p.ordinal, static_cast<int>(groups_.size()));
      if (added) {
        auto group = std::make_unique<Group>();
        group->ordinal = p.ordinal;
        groups_.push_back(std::move(group));
      }
      p.group = it->second;
      groups_[p.group]->members.push_back(static_cast<int>(i));
      participants_.push_back(std::move(p));
    }
    for (Participant& p : participants_) {
      ScopedGpu gpu(p.ordinal);
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name,
                                    cudaStreamCreateWithFlags(&p.side, cudaStreamNonBlocking));
      REPLICAD_CUDA_RETURN_IF_ERROR(
          p.name, cudaEventCreateWithFlags(&p.issued, cudaEventDisableTiming));
      REPLICAD_CUDA_RETURN_IF_ERROR(
          p.name, cudaEventCreateWithFlags(&p.reduced, cudaEventDisableTiming));
      REPLICAD_CUDA_RETURN_IF_ERROR(
          p.name, cudaEventCreateWithFlags(&p.ready, cudaEventDisableTiming));
    }
    for (auto& group : groups_) {
      ScopedGpu gpu(group->ordinal);
      REPLICAD_CUDA_RETURN_IF_ERROR(
          participants_[group->members[0]].name,
          cudaEventCreateWithFlags(&group->leader_done, cudaEventDisableTiming));
      group->posted.assign(group->members.size(), nullptr);
    }
    if (groups_.size() > 1) {
      std::vector<int> ordinals;
      for (const auto& group : groups_) ordinals.push_back(group->ordinal);
      std::vector<ncclComm_t> comms(groups_.size());
      REPLICAD_CUDA_RETURN_IF_ERROR(
          absl::StrCat("cuda:", absl::StrJoin(ordinals, ",cuda:")),
          ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data()));
      for (size_t g = 0; g < groups_.size(); ++g) groups_[g]->comm = comms[g];
    }
    return absl::OkStatus();
  }

  absl::Status AllReduce(int participant, float* data, size_t count, float scale,
                         bool contributes) override {
    Participant& p = participants_[participant];
    Group& group = *groups_[p.group];
    absl::Status status = Prepare(p, data, count, contributes);
    if (status.ok()) {
      status = group.members[0] == participant ? Lead(p, group, data, count, scale)
                                               : Follow(p, group, participant, data, count);
    }
    if (!status.ok()) {
      // The group's other slots must not wait for a round that cannot finish.
      absl::MutexLock lock(&group.mu);
      if (group.failure.ok()) group.failure = status;
      return status;
    }
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaEventRecord(p.reduced, p.side));
    return absl::OkStatus();
  }

  absl::Status Join(int participant) override {
    Participant& p = participants_[participant];
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.stream, p.reduced, 0));
    return absl::OkStatus();
  }

 private:
  struct Participant {
    std::string name;  // "cuda:0", for messages.
    int ordinal = 0;
    int group = 0;
    cudaStream_t stream = nullptr;   // The slot's.
    cudaStream_t side = nullptr;     // The reduction's.
    cudaEvent_t issued = nullptr;    // On the slot's stream: the side stream waits for it.
    cudaEvent_t ready = nullptr;     // On a follower's side stream: its buffer may be read.
    cudaEvent_t reduced = nullptr;   // On the side stream: Join waits for it.
  };

  // The slots of one GPU. A round is one AllReduce call of every member.
  struct Group {
    int ordinal = 0;
    std::vector<int> members;        // Participant indices; the first leads.
    ncclComm_t comm = nullptr;       // With more than one GPU.
    cudaEvent_t leader_done = nullptr;  // On the leader's side stream: the round's sum is ready.
    absl::Mutex mu;
    std::vector<float*> posted ABSL_GUARDED_BY(mu);  // Per member, this round; null: not yet.
    float* posted_sum ABSL_GUARDED_BY(mu) = nullptr;  // The leader's buffer, once summed.
    int64_t round ABSL_GUARDED_BY(mu) = 0;           // Rounds the leader completed.
    absl::Status failure ABSL_GUARDED_BY(mu);        // A member failed: rounds end with it.
  };

  // The side stream starts where the slot's work stands now, with zeros in
  // `data` for a participant that does not contribute.
  static absl::Status Prepare(Participant& p, float* data, size_t count, bool contributes) {
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaEventRecord(p.issued, p.stream));
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.side, p.issued, 0));
    if (!contributes) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          p.name, cudaMemsetAsync(data, 0, count * sizeof(float), p.side));
    }
    return absl::OkStatus();
  }

  absl::Status Lead(Participant& p, Group& group, float* data, size_t count, float scale) {
    const int64_t n = static_cast<int64_t>(count);
    {
      absl::MutexLock lock(&group.mu);
      auto all_posted = [&group]() ABSL_SHARED_LOCKS_REQUIRED(group.mu) {
        if (!group.failure.ok()) return true;
        for (size_t m = 1; m < group.posted.size(); ++m) {
          if (group.posted[m] == nullptr) return false;
        }
        return true;
      };
      group.mu.Await(absl::Condition(&all_posted));
      if (!group.failure.ok()) return group.failure;
      // In member order, so every run sums in the same order.
      for (size_t m = 1; m < group.members.size(); ++m) {
        Participant& member = participants_[group.members[m]];
        REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.side, member.ready, 0));
        LaunchAccumulate(data, group.posted[m], n, p.side);
        REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(p.name, "LaunchAccumulate"));
      }
    }
    if (group.comm != nullptr) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          p.name, ncclAllReduce(data, data, count, ncclFloat, ncclSum, group.comm, p.side));
    }
    if (scale != 1.0f) {
      LaunchScale(data, n, scale, p.side);
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(p.name, "LaunchScale"));
    }
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaEventRecord(group.leader_done, p.side));
    absl::MutexLock lock(&group.mu);
    group.posted_sum = data;
    for (float*& posted : group.posted) posted = nullptr;
    ++group.round;
    return absl::OkStatus();
  }

  absl::Status Follow(Participant& p, Group& group, int participant, float* data, size_t count) {
    // The leader reads `data` once this is reached (after any zero fill).
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaEventRecord(p.ready, p.side));
    absl::MutexLock lock(&group.mu);
    if (!group.failure.ok()) return group.failure;
    const size_t m = MemberIndex(group, participant);
    const int64_t round = group.round;
    group.posted[m] = data;
    auto led = [&group, round]() ABSL_SHARED_LOCKS_REQUIRED(group.mu) {
      return group.round > round || !group.failure.ok();
    };
    group.mu.Await(absl::Condition(&led));
    if (!group.failure.ok() && group.round == round) return group.failure;
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.side, group.leader_done, 0));
    REPLICAD_CUDA_RETURN_IF_ERROR(
        p.name, cudaMemcpyAsync(data, group.posted_sum, count * sizeof(float),
                                cudaMemcpyDeviceToDevice, p.side));
    return absl::OkStatus();
  }

  static size_t MemberIndex(const Group& group, int participant) {
    for (size_t m = 0; m < group.members.size(); ++m) {
      if (group.members[m] == participant) return m;
    }
    return 0;
  }

  std::vector<Participant> participants_;
  std::vector<std::unique_ptr<Group>> groups_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SlotAllReduce>> CreateNcclAllReduce(
    const std::vector<Device*>& slots) {
  if (slots.empty()) return absl::InvalidArgumentError("the reduction needs at least one slot");
  auto reduce = std::make_unique<NcclAllReduce>();
  REPLICAD_RETURN_IF_ERROR(reduce->Init(slots));
  return reduce;
}

}  // namespace replicad
