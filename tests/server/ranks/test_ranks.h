#ifndef REPLICAD_TESTS_SERVER_RANKS_TEST_RANKS_H_
#define REPLICAD_TESTS_SERVER_RANKS_TEST_RANKS_H_

#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "server/ranks/mpi_training_ranks.h"

namespace replicad::testing {

// This process's rank, one slot of weight 1, made once per test binary (MPI
// is initialised once per process, and finalised when the process exits, by
// the static's destructor: mpirun fails a rank that exits without it). Null
// (and a failed expectation) when MPI does not start.
inline std::shared_ptr<MpiTrainingRanks> TestRanks() {
  static const std::shared_ptr<MpiTrainingRanks> ranks = [] {
    MpiTrainingRanks::Options options;
    options.timeout = absl::Seconds(60);
    absl::StatusOr<std::shared_ptr<MpiTrainingRanks>> made =
        MpiTrainingRanks::Create({1.0}, std::move(options));
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *made : nullptr;
  }();
  return ranks;
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_SERVER_RANKS_TEST_RANKS_H_
