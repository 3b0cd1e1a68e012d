// Gradient reduction across CUDA slots. Slots on one GPU form a group whose
// first slot leads: the others post their buffers, the leader sums them into
// its own on the device (in slot order), runs the NCCL all-reduce across the
// groups' leaders (one communicator per GPU), scales, and the others copy the
// result back. Everything runs on one side stream per slot, ordered after the
// slot's work through events, so a bucket's reduction overlaps the rest of
// the backward pass until Join.
//
// Failures. Participants wait for each other in two places: on the host, in
// the rendezvous of a GPU's group, and on the devices, where an NCCL kernel
// waits for the other GPUs' leaders. A failed call anywhere sets one flag for
// the whole reduction (failed_), which every rendezvous wait also watches, so
// no thread waits for a participant that will not come; from then on the
// step's calls issue nothing, and if an NCCL call may have been issued this
// step the communicators are aborted, which ends the NCCL kernels waiting for
// a peer. The step ends at its last Join (every participant's last call of
// it, by the contract), which clears the flag; the next step's first
// AllReduce remakes the communicators, unless a slot's device is gone for
// good.
//
// Across ranks (peers): one communicator spans every rank's GPUs (each
// rank's GPUs in order, rank by rank), made at the first AllReduce with
// the unique id rank 0 hands round through peers.all_gather. Its
// communicators are non-blocking, and every NCCL call is made under
// comm_mu_ and returns at once: the waits for other ranks (NCCL's own
// connection set-up, and kernels waiting for a peer's data) are polls with
// a deadline, so a rank that died fails the step with Unavailable instead
// of hanging it, and an abort never frees a communicator a call is inside.
// NCCL cannot start afresh without every rank joining again, so a failure
// across ranks is for good: the peers' break_group ends the job, for its
// launcher to restart it from a checkpoint.
//
// Why Join, not AllReduce, reports failures: a caller that gets an error from
// AllReduce stops short (the trainer skips its Join, and may repeat the
// failed call), so no call would tell where its step ends, and a failure
// could never be cleared safely. Join once per step gives that point.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/cuda_slot.h"
#include "core/backends/cuda/scoped_gpu.h"
#include "core/backends/cuda/slot_reduce_launch.h"
#include "core/base/status_macros.h"
#include "core/device/poll_backoff.h"

namespace replicad {
namespace {

// A GPU's identity across processes (its UUID), for messages.
std::string UuidText(const std::string& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = "GPU-";
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[(static_cast<unsigned char>(uuid[i]) >> 4) & 15];
    text += kHex[static_cast<unsigned char>(uuid[i]) & 15];
  }
  return text;
}

constexpr size_t kUuidBytes = sizeof(cudaUUID_t);

class NcclAllReduce : public SlotAllReduce {
 public:
  ~NcclAllReduce() override {
    // Across ranks a kernel may still wait for a rank that is gone: the
    // communicators go first (an abort ends their kernels), then the streams.
    if (peers_) AbortNccl();
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
    }
    absl::MutexLock lock(&comm_mu_);
    for (size_t g = 0; g < comms_.size(); ++g) {
      if (comms_[g] == nullptr) continue;
      ScopedGpu gpu(groups_[g]->ordinal);
      // Across ranks, destroying would wait for the other ranks, which may
      // be gone: abort ends this rank's part alone.
      if (peers_) {
        ncclCommAbort(comms_[g]);
      } else {
        ncclCommDestroy(comms_[g]);
      }
    }
  }

  absl::Status Init(const std::vector<Device*>& slots, const SlotAllReducePeers* peers) {
    if (peers != nullptr && peers->size > 1) {
      if (!peers->all_gather) {
        return absl::InvalidArgumentError("a reduction across ranks needs the ranks' all_gather");
      }
      peers_ = *peers;
    }
    std::map<int, int> group_of_ordinal;
    for (size_t i = 0; i < slots.size(); ++i) {
      Participant p;
      p.name = DeviceIdToString(slots[i]->info().id);
      p.device = slots[i];
      p.ordinal = slots[i]->info().id.ordinal;
      p.stream = CudaSlotStream(*slots[i]);
      if (p.stream == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(p.name, ": not a slot of the CUDA backend"));
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
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name,
                                    cudaEventCreateWithFlags(&p.issued, cudaEventDisableTiming));
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name,
                                    cudaEventCreateWithFlags(&p.reduced, cudaEventDisableTiming));
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name,
                                    cudaEventCreateWithFlags(&p.ready, cudaEventDisableTiming));
    }
    for (auto& group : groups_) {
      ScopedGpu gpu(group->ordinal);
      REPLICAD_CUDA_RETURN_IF_ERROR(
          participants_[group->members[0]].name,
          cudaEventCreateWithFlags(&group->leader_done, cudaEventDisableTiming));
      absl::MutexLock lock(&group->mu);
      group->posted.assign(group->members.size(), nullptr);
    }
    if (UsesNccl()) {
      absl::MutexLock lock(&comm_mu_);
      comms_.assign(groups_.size(), nullptr);
      in_nccl_.assign(groups_.size(), false);
      if (peers_) {
        // Every rank makes its trainer when it is configured, not together:
        // they meet at their first step's first AllReduce.
        connect_pending_.store(true, std::memory_order_release);
      } else {
        REPLICAD_RETURN_IF_ERROR(CreateComms());
      }
    }
    return absl::OkStatus();
  }

  absl::Status AllReduce(int participant, float* data, size_t count, float scale,
                         bool contributes) override {
    Participant& p = participants_[participant];
    if (connect_pending_.load(std::memory_order_acquire)) Connect(p);
    if (recover_pending_.load(std::memory_order_acquire)) Recover(p);
    // The step already failed: nothing more to issue, and Join reports it.
    if (failed_.load(std::memory_order_acquire)) return absl::OkStatus();
    Group& group = *groups_[p.group];
    absl::Status status = Prepare(p, data, count, contributes);
    if (status.ok()) {
      status = group.members[0] == participant ? Lead(p, group, data, count, scale)
                                               : Follow(p, group, participant, data, count);
    }
    if (!status.ok()) Fail(status);
    return absl::OkStatus();
  }

  absl::Status Join(int participant) override {
    Participant& p = participants_[participant];
    // Recorded here rather than after each AllReduce, so that it also covers
    // a reduction a failure cut short: the slot's next work (the next step's
    // backward pass writing these buffers) must not overtake it.
    absl::Status status = [&p]() {
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaEventRecord(p.reduced, p.side));
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.stream, p.reduced, 0));
      return absl::OkStatus();
    }();
    // Across ranks the slot's next wait on its stream would be unbounded
    // if another rank never sends its part: wait here, with a deadline.
    if (status.ok() && peers_) status = AwaitReduced(p);
    if (!status.ok()) Fail(status);
    return EndStep();
  }

 private:
  struct Participant {
    std::string name;          // "cuda:0", for messages.
    Device* device = nullptr;  // The slot; its health() says whether its GPU is gone for good.
    int ordinal = 0;
    int group = 0;
    cudaStream_t stream = nullptr;  // The slot's.
    cudaStream_t side = nullptr;    // The reduction's.
    cudaEvent_t issued = nullptr;   // On the slot's stream: the side stream waits for it.
    cudaEvent_t ready = nullptr;    // On a follower's side stream: its buffer may be read.
    cudaEvent_t reduced = nullptr;  // On the side stream: Join waits for it.
  };

  // The slots of one GPU. A round is one AllReduce call of every member.
  struct Group {
    int ordinal = 0;
    std::vector<int> members;           // Participant indices; the first leads.
    cudaEvent_t leader_done = nullptr;  // On the leader's side stream: the round's sum is ready.
    absl::Mutex mu;
    std::vector<float*> posted ABSL_GUARDED_BY(mu);   // Per member, this round; null: not yet.
    float* posted_sum ABSL_GUARDED_BY(mu) = nullptr;  // The leader's buffer, once summed.
    int64_t round ABSL_GUARDED_BY(mu) = 0;            // Rounds the leader completed.
  };

  // What a participant's call returns when it stops for another's failure
  // (failure_ already holds that one, so this message is not reported).
  static absl::Status Stopped(const Participant& p) {
    return absl::AbortedError(
        absl::StrCat(p.name, ": gradient reduction stopped: another participant failed"));
  }

  // The side stream starts where the slot's work stands now, with zeros in
  // `data` for a participant that does not contribute.
  static absl::Status Prepare(Participant& p, float* data, size_t count, bool contributes) {
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaEventRecord(p.issued, p.stream));
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.side, p.issued, 0));
    if (!contributes) {
      REPLICAD_CUDA_RETURN_IF_ERROR(p.name,
                                    cudaMemsetAsync(data, 0, count * sizeof(float), p.side));
    }
    return absl::OkStatus();
  }

  absl::Status Lead(Participant& p, Group& group, float* data, size_t count, float scale) {
    const int64_t n = static_cast<int64_t>(count);
    {
      absl::MutexLock lock(&group.mu);
      // failed_ is not guarded by group.mu: Fail locks group.mu after setting
      // it, which makes absl::Mutex evaluate this again and wake us.
      auto all_posted = [this, &group]() ABSL_SHARED_LOCKS_REQUIRED(group.mu) {
        if (failed_.load(std::memory_order_acquire)) return true;
        for (size_t m = 1; m < group.posted.size(); ++m) {
          if (group.posted[m] == nullptr) return false;
        }
        return true;
      };
      group.mu.Await(absl::Condition(&all_posted));
      if (failed_.load(std::memory_order_acquire)) return Stopped(p);
      // In member order, so every run sums in the same order.
      for (size_t m = 1; m < group.members.size(); ++m) {
        Participant& member = participants_[group.members[m]];
        REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.side, member.ready, 0));
        LaunchAccumulate(data, group.posted[m], n, p.side);
        REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(p.name, "LaunchAccumulate"));
      }
    }
    if (UsesNccl()) REPLICAD_RETURN_IF_ERROR(IssueNccl(p, data, count));
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
    if (failed_.load(std::memory_order_acquire)) return Stopped(p);
    const size_t m = MemberIndex(group, participant);
    const int64_t round = group.round;
    group.posted[m] = data;
    // Woken by Fail as in Lead.
    auto led = [this, &group, round]() ABSL_SHARED_LOCKS_REQUIRED(group.mu) {
      return group.round > round || failed_.load(std::memory_order_acquire);
    };
    group.mu.Await(absl::Condition(&led));
    // A round the leader completed before the failure still has its sum.
    if (group.round == round) return Stopped(p);
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name, cudaStreamWaitEvent(p.side, group.leader_done, 0));
    REPLICAD_CUDA_RETURN_IF_ERROR(p.name,
                                  cudaMemcpyAsync(data, group.posted_sum, count * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, p.side));
    return absl::OkStatus();
  }

  // NCCL between GPUs: of this process, or across ranks.
  bool UsesNccl() const { return groups_.size() > 1 || peers_.has_value(); }

  // The leader's NCCL call, counted in in_nccl_ while it runs so that an
  // abort never frees a communicator under it (see AbortNccl).
  absl::Status IssueNccl(Participant& p, float* data, size_t count) {
    if (peers_) return IssueNcclAcrossRanks(p, data, count);
    ncclComm_t comm;
    {
      absl::MutexLock lock(&comm_mu_);
      // Checked under comm_mu_, which Fail takes after setting failed_:
      // either this call sees the failure and issues nothing, or AbortNccl
      // sees nccl_issued_ and aborts what this issues.
      if (failed_.load(std::memory_order_acquire)) return Stopped(p);
      // Recover remakes them or fails the step before any leader gets here.
      if (!comms_usable_) {
        return absl::FailedPreconditionError(
            absl::StrCat(p.name, ": the NCCL communicators were aborted and not made again"));
      }
      comm = comms_[p.group];
      in_nccl_[p.group] = true;
      ++in_nccl_count_;
      nccl_issued_ = true;
    }
    absl::Status status = [&]() {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          p.name, ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm, p.side));
      return absl::OkStatus();
    }();
    absl::MutexLock lock(&comm_mu_);
    in_nccl_[p.group] = false;
    --in_nccl_count_;
    return status;
  }

  // Across ranks the call is made under comm_mu_ (a non-blocking
  // communicator returns at once), then its set-up is polled.
  absl::Status IssueNcclAcrossRanks(Participant& p, float* data, size_t count) {
    {
      absl::MutexLock lock(&comm_mu_);
      if (failed_.load(std::memory_order_acquire)) return Stopped(p);
      if (!comms_usable_) {
        return absl::FailedPreconditionError(
            absl::StrCat(p.name, ": the NCCL communicator across ranks is gone"));
      }
      nccl_issued_ = true;
      const ncclResult_t issued =
          ncclAllReduce(data, data, count, ncclFloat, ncclSum, comms_[p.group], p.side);
      if (issued == ncclSuccess) return absl::OkStatus();
      if (issued != ncclInProgress) return CudaCallStatus(issued, p.name, "ncclAllReduce");
    }
    return AwaitCommunicator(p, "ncclAllReduce");
  }

  // Until the participant's group's communicator is no longer in progress
  // (a non-blocking call's set-up, which may wait for other ranks).
  absl::Status AwaitCommunicator(const Participant& p, absl::string_view call) {
    const absl::Time deadline = absl::Now() + peers_->timeout;
    PollBackoff backoff;
    for (;;) {
      {
        absl::MutexLock lock(&comm_mu_);
        const bool failed = failed_.load(std::memory_order_acquire);
        if (!comms_usable_) {
          if (failed) return Stopped(p);
          return absl::FailedPreconditionError(
              absl::StrCat(p.name, ": the NCCL communicator across ranks is gone"));
        }
        ncclResult_t state = ncclSuccess;
        REPLICAD_RETURN_IF_ERROR(
            CudaCallStatus(ncclCommGetAsyncError(comms_[p.group], &state), p.name, call));
        // After another participant's failure this one still waits until
        // its call has left NCCL's hands (or the communicator is aborted):
        // Join then issues work on the stream NCCL may still be using.
        if (failed && state != ncclInProgress) return Stopped(p);
        if (state == ncclSuccess) return absl::OkStatus();
        if (state != ncclInProgress) return CudaCallStatus(state, p.name, call);
      }
      if (absl::Now() > deadline) return NoAnswer(p, call);
      backoff.Wait();
    }
  }

  // Join across ranks: until the participant's reduction has run on its
  // GPU, an NCCL error shows, or the deadline passes.
  absl::Status AwaitReduced(const Participant& p) {
    const bool leads = groups_[p.group]->members[0] == static_cast<int>(&p - participants_.data());
    // The slot's own work first (its backward pass, up to its last bucket),
    // however long it takes: the deadline is for the other ranks.
    for (PollBackoff backoff;;) {
      const cudaError_t computed = cudaEventQuery(p.issued);
      if (computed == cudaSuccess) break;
      if (computed != cudaErrorNotReady) return CudaCallStatus(computed, p.name, "cudaEventQuery");
      if (failed_.load(std::memory_order_acquire)) break;
      backoff.Wait();
    }
    const absl::Time deadline = absl::Now() + peers_->timeout;
    PollBackoff backoff;
    for (;;) {
      const cudaError_t done = cudaEventQuery(p.reduced);
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) return CudaCallStatus(done, p.name, "cudaEventQuery");
      if (leads) {
        // A peer's failure NCCL has seen (a closed connection) ends the
        // wait before the deadline.
        absl::MutexLock lock(&comm_mu_);
        if (comms_usable_ && comms_[p.group] != nullptr) {
          ncclResult_t state = ncclSuccess;
          if (ncclCommGetAsyncError(comms_[p.group], &state) == ncclSuccess &&
              state != ncclSuccess && state != ncclInProgress) {
            return CudaCallStatus(state, p.name, "the NCCL all-reduce across ranks");
          }
        }
      }
      if (absl::Now() > deadline) {
        // Another participant's failure aborted the communicators, which
        // ends the kernels: this one's wait is then not the step's error.
        if (failed_.load(std::memory_order_acquire)) return Stopped(p);
        return NoAnswer(p, "the NCCL all-reduce across ranks");
      }
      backoff.Wait();
    }
  }

  absl::Status NoAnswer(const Participant& p, absl::string_view what) const {
    return absl::UnavailableError(absl::StrCat(p.name, ": ", what, " did not finish within ",
                                               absl::FormatDuration(peers_->timeout), " (rank ",
                                               peers_->rank, " of ", peers_->size,
                                               "): another rank died or stopped answering"));
  }

  // The first AllReduce across ranks (any participant; the others wait on
  // comm_mu_): the ranks hand round rank 0's unique id and their GPUs, and
  // make the communicator spanning them all.
  void Connect(const Participant& p) {
    absl::Status status;
    bool first_failure = false;
    bool every_rank_alike = false;
    {
      absl::MutexLock lock(&comm_mu_);
      if (!connect_pending_.load(std::memory_order_acquire)) return;  // Another participant did.
      status = ConnectAcrossRanks(p, &every_rank_alike);
      if (!status.ok()) first_failure = SetFailure(status, /*for_good=*/true);
      connect_pending_.store(false, std::memory_order_release);
    }
    // A failure every rank found in the same gathered parts leaves the
    // ranks in step: every step fails with it, and the group stays, so that
    // the job can answer why.
    if (first_failure) WakeAndBreak(status, /*break_group=*/!every_rank_alike);
  }

  // `*every_rank_alike`: it failed on what every rank gathered, so every
  // rank fails alike.
  absl::Status ConnectAcrossRanks(const Participant& p, bool* every_rank_alike)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu_) {
    // Everything here polls: NCCL_COMM_BLOCKING=1 (which overrides the
    // communicators' config) would block, unbounded, under comm_mu_.
    if (const char* blocking = std::getenv("NCCL_COMM_BLOCKING");
        blocking != nullptr && std::string(blocking) != "0") {
      *every_rank_alike = true;  // The launcher gives every rank the same environment.
      return absl::FailedPreconditionError(absl::StrCat(
          "NCCL_COMM_BLOCKING=", blocking,
          ": training across ranks needs NCCL's non-blocking communicators, to bound its waits "
          "for other ranks; unset it"));
    }
    // This rank's part: a unique id (rank 0's is the one used), then the
    // UUID of each of its GPUs, one NCCL rank each.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (peers_->rank == 0) REPLICAD_CUDA_RETURN_IF_ERROR(p.name, ncclGetUniqueId(&id));
    std::string mine(reinterpret_cast<const char*>(&id), sizeof(id));
    for (const auto& group : groups_) {
      cudaDeviceProp properties;
      REPLICAD_CUDA_RETURN_IF_ERROR(participants_[group->members[0]].name,
                                    cudaGetDeviceProperties(&properties, group->ordinal));
      mine.append(reinterpret_cast<const char*>(&properties.uuid), kUuidBytes);
    }
    absl::StatusOr<std::vector<std::string>> parts = peers_->all_gather(mine);
    if (!parts.ok()) return parts.status();
    if (parts->size() != static_cast<size_t>(peers_->size)) {
      return absl::InternalError(absl::StrCat("the ranks' gather returned ", parts->size(),
                                              " parts for ", peers_->size, " ranks"));
    }
    int total = 0, first = 0;
    std::map<std::string, std::pair<int, int>> owner;  // UUID -> (rank, its GPU index).
    for (int r = 0; r < peers_->size; ++r) {
      const std::string& part = (*parts)[r];
      if (part.size() < sizeof(id) || (part.size() - sizeof(id)) % kUuidBytes != 0) {
        return absl::InternalError(
            absl::StrCat("rank ", r, " sent ", part.size(), " bytes for its GPUs"));
      }
      const int gpus = static_cast<int>((part.size() - sizeof(id)) / kUuidBytes);
      for (int g = 0; g < gpus; ++g) {
        const std::string uuid = part.substr(sizeof(id) + g * kUuidBytes, kUuidBytes);
        auto [it, added] = owner.emplace(uuid, std::make_pair(r, g));
        if (!added) {
          *every_rank_alike = true;
          return absl::FailedPreconditionError(absl::StrCat(
              "rank ", r, " and rank ", it->second.first, " both train on GPU ", UuidText(uuid),
              ": NCCL takes each GPU once across the ranks, so give each rank its own GPUs "
              "(--devices, or CUDA_VISIBLE_DEVICES per rank)"));
        }
      }
      if (r < peers_->rank) first += gpus;
      total += gpus;
    }
    std::memcpy(&id, (*parts)[0].data(), sizeof(id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    absl::Status status;
    // In a group, as one thread making several GPUs' ranks must (were the
    // communicators blocking, each init alone would wait for the others).
    if (const ncclResult_t started = ncclGroupStart(); started != ncclSuccess) {
      return CudaCallStatus(started, p.name, "ncclGroupStart");
    }
    for (size_t g = 0; g < groups_.size() && status.ok(); ++g) {
      ScopedGpu gpu(groups_[g]->ordinal);
      const ncclResult_t made =
          ncclCommInitRankConfig(&comms_[g], total, id, first + static_cast<int>(g), &config);
      if (made != ncclSuccess && made != ncclInProgress) {
        status = CudaCallStatus(made, participants_[groups_[g]->members[0]].name,
                                "ncclCommInitRankConfig");
      }
    }
    if (const ncclResult_t ended = ncclGroupEnd();
        status.ok() && ended != ncclSuccess && ended != ncclInProgress) {
      status = CudaCallStatus(ended, p.name, "ncclGroupEnd");
    }
    // Until every GPU of every rank has joined.
    const absl::Time deadline = absl::Now() + peers_->timeout;
    PollBackoff backoff;
    for (size_t g = 0; g < groups_.size() && status.ok();) {
      const std::string& name = participants_[groups_[g]->members[0]].name;
      ncclResult_t state = ncclSuccess;
      status =
          CudaCallStatus(ncclCommGetAsyncError(comms_[g], &state), name, "ncclCommGetAsyncError");
      if (!status.ok()) break;
      if (state == ncclSuccess) {
        ++g;
      } else if (state != ncclInProgress) {
        status = CudaCallStatus(state, name, "ncclCommInitRankConfig");
      } else if (absl::Now() > deadline) {
        status = absl::UnavailableError(absl::StrCat(
            name, ": the ", total, " GPUs of the ", peers_->size,
            " ranks did not all join the NCCL communicator within ",
            absl::FormatDuration(peers_->timeout), ": a rank died or cannot reach this one"));
      } else {
        backoff.Wait();
      }
    }
    if (!status.ok()) {
      for (size_t g = 0; g < comms_.size(); ++g) {
        if (comms_[g] == nullptr) continue;
        ScopedGpu gpu(groups_[g]->ordinal);
        (void)ncclCommAbort(comms_[g]);
        comms_[g] = nullptr;
      }
      return status;
    }
    comms_usable_ = true;
    return absl::OkStatus();
  }

  static size_t MemberIndex(const Group& group, int participant) {
    for (size_t m = 0; m < group.members.size(); ++m) {
      if (group.members[m] == participant) return m;
    }
    return 0;
  }

  // One communicator per GPU, the leaders' ranks in group order.
  absl::Status CreateComms() ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu_) {
    std::vector<int> ordinals;
    for (const auto& group : groups_) ordinals.push_back(group->ordinal);
    std::vector<ncclComm_t> comms(groups_.size(), nullptr);
    REPLICAD_CUDA_RETURN_IF_ERROR(
        absl::StrCat("cuda:", absl::StrJoin(ordinals, ",cuda:")),
        ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data()));
    comms_ = std::move(comms);
    comms_usable_ = true;
    return absl::OkStatus();
  }

  // Records the step's failure; `for_good`: it stays for every later step.
  // False if the step had failed already (the first failure is the one
  // reported). Takes mu_ only, so it may be called with comm_mu_ held.
  bool SetFailure(const absl::Status& status, bool for_good) {
    // Across ranks the communicator cannot be made again mid-job.
    if (peers_) for_good = true;
    absl::MutexLock lock(&mu_);
    if (for_good && permanent_.ok()) permanent_ = status;
    if (!failure_.ok()) return false;
    failure_ = status;
    failed_.store(true, std::memory_order_release);
    return true;
  }

  // A participant's call failed: the whole step's reduction stops.
  void Fail(const absl::Status& status) {
    // Not the first: that one's Fail wakes the waiters and aborts NCCL.
    if (!SetFailure(status, /*for_good=*/false)) return;
    WakeAndBreak(status, /*break_group=*/true);
  }

  // After the step's first failure: wakes the waiters, aborts NCCL, and
  // across ranks ends the job's training.
  void WakeAndBreak(const absl::Status& status, bool break_group) {
    // Waiters in a rendezvous watch failed_, which their mutex does not
    // guard: locking and unlocking it makes absl::Mutex evaluate their
    // conditions again.
    for (auto& group : groups_) {
      absl::MutexLock wake(&group->mu);
    }
    // The group first: an abort may take long (NCCL joins its threads).
    if (break_group && peers_ && peers_->break_group) peers_->break_group(status);
    AbortNccl();
  }

  // Ends NCCL work that may wait for a leader that will not come: kernels on
  // the other GPUs waiting for its data (only an abort stops those), and a
  // leader blocked in ncclAllReduce on the host (NCCL may connect peers at
  // their first collective, waiting for every rank to arrive).
  //
  // ncclCommAbort may be called while another thread is inside an NCCL call
  // on that communicator: it sets the flag that call polls. But the
  // communicators made together by ncclCommInitAll are freed together, by
  // the abort of the last of them, so the last is aborted only once no
  // leader is inside NCCL. Every communicator in use is aborted as soon as
  // one not in use remains unaborted (so it is not the last), and the wait
  // ends: a leader whose communicator was aborted returns, and while every
  // unaborted communicator is in use, the leaders at the earliest collective
  // have all their peers there and return too, leaving one not in use.
  void AbortNccl() {
    if (!UsesNccl()) return;
    absl::MutexLock lock(&comm_mu_);
    if (peers_) {
      // No call is inside a communicator (they are all made under
      // comm_mu_), so each is aborted at once, which ends this rank's
      // kernels that wait for a peer. (This process's communicators of one
      // clique are freed together, by the last abort: nothing uses any of
      // them in between.)
      if (!comms_usable_) return;
      comms_usable_ = false;
      for (size_t g = 0; g < comms_.size(); ++g) {
        if (comms_[g] == nullptr) continue;
        ScopedGpu gpu(groups_[g]->ordinal);
        (void)CudaCallStatus(ncclCommAbort(comms_[g]), participants_[groups_[g]->members[0]].name,
                             "ncclCommAbort");
        comms_[g] = nullptr;
      }
      return;
    }
    // No NCCL call this step: those of earlier steps all had their peers (a
    // step without failure issues every one; a failed step aborted them), so
    // no kernel waits for a peer that will not come. Or another failure of
    // this step got here first.
    if (!nccl_issued_ || !comms_usable_) return;
    comms_usable_ = false;  // No leader starts an NCCL call from here on.
    std::vector<bool> aborted(comms_.size(), false);
    auto abort = [&](size_t g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu_) {
      ScopedGpu gpu(groups_[g]->ordinal);
      // It always sets the abort flag; an error of its cleanup leaves
      // nothing more to do here (the communicator is remade either way),
      // and the step already reports its first failure.
      (void)CudaCallStatus(ncclCommAbort(comms_[g]), participants_[groups_[g]->members[0]].name,
                           "ncclCommAbort");
      aborted[g] = true;
    };
    while (true) {
      bool idle = false;
      for (size_t g = 0; g < comms_.size(); ++g) idle = idle || (!aborted[g] && !in_nccl_[g]);
      if (idle) {
        for (size_t g = 0; g < comms_.size(); ++g) {
          if (!aborted[g] && in_nccl_[g]) abort(g);
        }
      }
      if (in_nccl_count_ == 0) break;
      const int before = in_nccl_count_;
      auto fewer = [this, before]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu_) {
        return in_nccl_count_ < before;  // A leader left NCCL.
      };
      comm_mu_.Await(absl::Condition(&fewer));
    }
    for (size_t g = 0; g < comms_.size(); ++g) {
      if (!aborted[g]) abort(g);
    }
    comms_.assign(comms_.size(), nullptr);
  }

  // The first AllReduce of a step after a failed one (any participant; the
  // others wait on comm_mu_ meanwhile, so none is in a rendezvous or in NCCL
  // yet): a slot whose device is gone for good fails this step and every
  // later one; otherwise aborted communicators are made again.
  void Recover(const Participant& p) {
    absl::MutexLock lock(&comm_mu_);
    if (!recover_pending_.load(std::memory_order_acquire)) return;  // Another participant did.
    absl::Status status;
    bool for_good = false;
    for (const Participant& q : participants_) {
      status = q.device->health();
      if (!status.ok()) {
        for_good = true;
        break;
      }
    }
    if (status.ok() && groups_.size() > 1 && !comms_usable_) {
      ScopedGpu gpu(p.ordinal);
      status = CreateComms();
    }
    // Before recover_pending_ is cleared: the others then see failed_.
    if (!status.ok()) SetFailure(status, for_good);
    recover_pending_.store(false, std::memory_order_release);
  }

  // Counts Joins; the last of a step ends it. Every participant has then made
  // its last call of the step (the contract), so no thread waits in a
  // rendezvous or is inside NCCL, and any abort is done (Fail returns
  // before its participant's Join). The step's first failure, if any.
  absl::Status EndStep() {
    absl::Status result;
    bool recover = false;
    {
      absl::MutexLock lock(&mu_);
      result = failure_;
      if (++joined_ < participants_.size()) return result;
      joined_ = 0;
      if (!permanent_.ok()) {
        // A slot gone for good: every later step fails with that (failed_ stays).
        failure_ = permanent_;
      } else if (!failure_.ok()) {
        failure_ = absl::OkStatus();
        failed_.store(false, std::memory_order_release);
        recover = true;
      }
    }
    if (UsesNccl()) {
      absl::MutexLock lock(&comm_mu_);
      nccl_issued_ = false;
    }
    if (recover) {
      // A failure can stop a round half way, with buffers posted.
      for (auto& group : groups_) {
        absl::MutexLock lock(&group->mu);
        for (float*& posted : group->posted) posted = nullptr;
        group->posted_sum = nullptr;
      }
      recover_pending_.store(true, std::memory_order_release);
    }
    return result;
  }

  std::vector<Participant> participants_;
  std::vector<std::unique_ptr<Group>> groups_;

  // The step's failure; lock order: comm_mu_, then mu_ (Recover).
  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);    // The step's first; OK: none yet.
  absl::Status permanent_ ABSL_GUARDED_BY(mu_);  // A slot gone for good: every step's failure.
  size_t joined_ ABSL_GUARDED_BY(mu_) = 0;       // Joins made this step.
  // !failure_.ok(), readable without mu_: the calls' fast path and the
  // rendezvous waits watch it.
  std::atomic<bool> failed_{false};
  // The last step failed: the next one's first AllReduce calls Recover.
  std::atomic<bool> recover_pending_{false};
  // Across ranks: the other ranks, and whether the communicator spanning
  // them is still to be made (at the first AllReduce, by Connect).
  std::optional<SlotAllReducePeers> peers_;
  std::atomic<bool> connect_pending_{false};

  // The NCCL communicators (more than one GPU only).
  absl::Mutex comm_mu_;
  std::vector<ncclComm_t> comms_ ABSL_GUARDED_BY(comm_mu_);  // Per group.
  bool comms_usable_ ABSL_GUARDED_BY(comm_mu_) = false;      // False once aborted, until remade.
  std::vector<bool> in_nccl_ ABSL_GUARDED_BY(comm_mu_);      // Per group: its leader is in NCCL.
  int in_nccl_count_ ABSL_GUARDED_BY(comm_mu_) = 0;
  bool nccl_issued_ ABSL_GUARDED_BY(comm_mu_) = false;  // An NCCL call this step.
};

}  // namespace

absl::StatusOr<std::unique_ptr<SlotAllReduce>> CreateNcclAllReduce(
    const std::vector<Device*>& slots, const SlotAllReducePeers* peers) {
  if (slots.empty()) return absl::InvalidArgumentError("the reduction needs at least one slot");
  auto reduce = std::make_unique<NcclAllReduce>();
  REPLICAD_RETURN_IF_ERROR(reduce->Init(slots, peers));
  return reduce;
}

}  // namespace replicad
