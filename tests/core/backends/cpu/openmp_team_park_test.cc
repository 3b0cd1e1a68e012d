#include "core/backends/cpu/openmp_team_park.h"

#include <omp.h>

#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

// Polls `park.parked_threads()` for up to 30 s; the count it settled on.
int AwaitParked(const OpenMpTeamPark& park, int expected) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (park.parked_threads() != expected && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return park.parked_threads();
}

// Each test runs on a thread of its own: a fresh OpenMP master, as a slot's
// stream thread is.
TEST(OpenMpTeamParkTest, TheTeamsOtherThreadsWaitInsideWhileSleepRuns) {
  std::thread([] {
    constexpr int kThreads = 3;
    omp_set_num_threads(kThreads);
    int team = 0;
#pragma omp parallel
#pragma omp single
    team = omp_get_num_threads();
    ASSERT_GE(team, 2) << "OpenMP gave no team (OMP_THREAD_LIMIT?)";

    OpenMpTeamPark park(kThreads);
    int parked_while_sleeping = -1;
    bool slept_on_master = false;
    park.Park([&] {
      slept_on_master = omp_get_thread_num() == 0;
      parked_while_sleeping = AwaitParked(park, omp_get_num_threads() - 1);
    });
    EXPECT_TRUE(slept_on_master);
    EXPECT_EQ(parked_while_sleeping, team - 1);
    EXPECT_EQ(park.parked_threads(), 0);

    // The team serves the next parallel region as before.
    int after = 0;
#pragma omp parallel
#pragma omp single
    after = omp_get_num_threads();
    EXPECT_EQ(after, team);
  }).join();
}

TEST(OpenMpTeamParkTest, ParksAgainAfterEachWake) {
  std::thread([] {
    omp_set_num_threads(2);
    OpenMpTeamPark park(2);
    for (int i = 0; i < 20; ++i) {
      int parked = -1;
      park.Park([&] { parked = AwaitParked(park, omp_get_num_threads() - 1); });
      EXPECT_EQ(parked, 1) << "park " << i;
      long sum = 0;
#pragma omp parallel for reduction(+ : sum)
      for (int j = 0; j < 1000; ++j) sum += j;
      EXPECT_EQ(sum, 999 * 1000 / 2);
    }
  }).join();
}

TEST(OpenMpTeamParkTest, OneThreadJustSleepsOutsideAnyParallelRegion) {
  std::thread([] {
    OpenMpTeamPark park(1);
    bool ran = false, in_parallel = true;
    park.Park([&] {
      ran = true;
      in_parallel = omp_in_parallel();
    });
    EXPECT_TRUE(ran);
    EXPECT_FALSE(in_parallel);
    EXPECT_EQ(park.parked_threads(), 0);
  }).join();
}

}  // namespace
}  // namespace replicad
