// What a step across ranks spends talking between them, on the host (MPI
// through rank 0; CPU slots): the per-step agreement (GatherReadiness) and
// the sum of a step's gradients (SumStep) at several sizes, ResNet-50's
// 25.6M floats among them. Run under the launcher:
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/benchmarks/rank_exchange_bench
// Rank 0 prints one line per measurement (median, mean and min over the
// passes; GB/s counts each rank's gradient bytes once).

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmarks/bench_timing.h"
#include "server/ranks/mpi_training_ranks.h"

namespace replicad {
namespace {

int Run() {
  MpiTrainingRanks::Options options;
  options.timeout = absl::Seconds(120);
  absl::StatusOr<std::shared_ptr<MpiTrainingRanks>> made =
      MpiTrainingRanks::Create({1.0}, std::move(options));
  if (!made.ok()) {
    std::fprintf(stderr, "rank_exchange_bench: %s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  MpiTrainingRanks& ranks = **made;
  const bool report = ranks.rank() == 0;
  if (report) std::printf("ranks: %d (MPI through rank 0, host memory)\n", ranks.size());

  absl::StatusOr<Timing> readiness = Measure("GatherReadiness", 100, 2000, [&] {
    return GatherReadiness(ranks, absl::OkStatus(), "CPU slots (the host)\n0123456789abcdef\n7")
        .status();
  });
  if (!readiness.ok()) return 1;
  if (report) {
    std::printf("%-34s median %8.1f us  mean %8.1f us  min %8.1f us\n", "GatherReadiness",
                readiness->median_ms * 1e3, readiness->mean_ms * 1e3, readiness->min_ms * 1e3);
  }
  for (const int64_t floats : {int64_t{1000}, int64_t{1000000}, int64_t{25557032}}) {
    const int passes = floats > 1000000 ? 5 : 50;
    int64_t step = 0;
    // The trainer keeps its sums' vectors from step to step; so does this.
    RankPartial partial;
    partial.gradients.assign(1, std::vector<float>(static_cast<size_t>(floats), 0.5f));
    absl::StatusOr<Timing> sum = Measure("SumStep", 2, passes, [&] {
      partial.status = absl::OkStatus();
      partial.loss_sum = 1;
      return ranks.SumStep(++step, &partial);  // The values double each pass: no overflow.
    });
    if (!sum.ok()) return 1;
    if (report) {
      const double bytes = static_cast<double>(floats) * sizeof(float);
      std::printf("%-34s median %8.2f ms  mean %8.2f ms  min %8.2f ms  %6.2f GB/s\n",
                  absl::StrFormat("SumStep %d floats (%.1f MB)", floats, bytes / 1e6).c_str(),
                  sum->median_ms, sum->mean_ms, sum->min_ms, bytes / (sum->median_ms * 1e-3) / 1e9);
    }
  }
  return 0;
}

}  // namespace
}  // namespace replicad

int main() { return replicad::Run(); }
