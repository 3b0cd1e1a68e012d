#ifndef REPLICAD_CORE_BACKENDS_CPU_OPENMP_TEAM_PARK_H_
#define REPLICAD_CORE_BACKENDS_CPU_OPENMP_TEAM_PARK_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace replicad {

// Keeps an idle CPU slot's OpenMP threads off the cores.
//
// After each parallel region, GNU OpenMP's worker threads spin for the next
// one before they sleep: GOMP_SPINCOUNT's default of 300,000 spins, about
// 4 ms of a core each on an AMD EPYC VM (libgomp spins far less only when a
// process has more OpenMP threads than cores). So after every request a
// slot's workers kept spinning while gRPC's threads read the next request or
// other slots computed: a 19 MB Predict over loopback gRPC cost 2-3 ms more
// (benchmarks/RESULTS.md). The slot's stream, idle for a millisecond
// (HostStream::kLongIdle), calls Park: the team's other threads enter a
// parallel region of Park's own and block there, using no CPU, until the
// stream has work again. The environment stays the user's: a smaller
// GOMP_SPINCOUNT or OMP_WAIT_POLICY=passive would also slow the gaps between
// a pass's own primitives, and libgomp reads them only once, at load.
//
// One instance per team (per stream thread); Park is called from that
// thread only, never from inside a parallel region.
class OpenMpTeamPark {
 public:
  // `threads`: the team's size (the slot's OpenMP threads). 1 or fewer: no
  // team to park, and Park just runs `sleep`.
  explicit OpenMpTeamPark(int threads) : threads_(threads) {}

  OpenMpTeamPark(const OpenMpTeamPark&) = delete;
  OpenMpTeamPark& operator=(const OpenMpTeamPark&) = delete;

  // Runs `sleep` on the calling thread while the team's other threads wait,
  // blocked, inside a parallel region; returns once `sleep` has returned and
  // they have left the region.
  void Park(absl::FunctionRef<void()> sleep);

  // Threads blocked inside Park now (for tests).
  int parked_threads() const;

 private:
  const int threads_;
  absl::Mutex mu_;
  bool master_awake_ ABSL_GUARDED_BY(mu_) = true;
  std::atomic<int> parked_{0};
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_OPENMP_TEAM_PARK_H_
