// Split/merge overhead: Predict through a ReplicaSet of 1, 2 and 4 CPU slots
// against the same forward pass run directly on one execution plan, for the
// embedded default model (28x28x1 CNN) at several batch sizes.
//
// Run with:
//   build/benchmarks/split_merge_bench --benchmark_counters_tabular=true
//
// "direct" is ExecutionPlan::Run on the calling thread: no split, no stream
// hop, no merge. "slots:N" is ReplicaSet::Predict over N slots on cpu:0 (one
// OpenMP thread each), waited for synchronously. items_per_second is images
// per second; compare the rows at the same batch.
#include <omp.h>

#include <memory>

#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/model/default_model.h"
#include "core/serve/replica_set.h"

namespace replicad {
namespace {

Tensor Images(int64_t batch) {
  Tensor t = Tensor::Host(DType::kFloat32, {batch, 1, 28, 28});
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = (i % 255) / 255.0f;
  return t;
}

std::unique_ptr<ReplicaSet> CpuSlots(int slots) {
  std::shared_ptr<const Model> model = *LoadDefaultModel();
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < slots; ++i) {
    replicas.push_back(*Replica::Create(model, SlotAssignment{"r" + std::to_string(i), cpu.id, 1},
                                        CreateCpuDevice(cpu, CpuSlotOptions{1})));
  }
  return *ReplicaSet::Create(model, std::move(replicas), ReplicaSet::Options{cpu.id, nullptr});
}

class HostSink : public OutputSink {
 public:
  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override {
    buffers_[index] = Tensor::Host(type.dtype, type.shape);
    return buffers_[index].raw_data();
  }

 private:
  Tensor buffers_[2];
};

void BM_Direct(benchmark::State& state) {
  const int64_t batch = state.range(0);
  std::unique_ptr<ReplicaSet> set = CpuSlots(1);
  Replica& replica = *set->replicas()[0];
  std::shared_ptr<ExecutionPlan> plan = *replica.PlanFor({{batch, 1, 28, 28}});
  Tensor input = Images(batch);
  Tensor logits = Tensor::Host(DType::kFloat32, {batch, 10});
  Tensor probabilities = Tensor::Host(DType::kFloat32, {batch, 10});
  const void* inputs[] = {input.raw_data()};
  void* outputs[] = {logits.raw_data(), probabilities.raw_data()};
  omp_set_num_threads(1);  // As a slot runs it.
  for (auto _ : state) {
    if (!plan->Run(inputs, outputs).ok()) state.SkipWithError("run failed");
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

void BM_ReplicaSet(benchmark::State& state) {
  const int64_t batch = state.range(0);
  std::unique_ptr<ReplicaSet> set = CpuSlots(static_cast<int>(state.range(1)));
  Tensor input = Images(batch);
  HostSink sink;
  auto predict = [&] {
    absl::Notification done;
    set->Predict({input}, &sink, [&](absl::Status status, std::vector<BatchSlice>) {
      if (!status.ok()) state.SkipWithError("predict failed");
      done.Notify();
    });
    done.WaitForNotification();
  };
  predict();  // Builds the plans for this batch's slices.
  for (auto _ : state) predict();
  state.SetItemsProcessed(state.iterations() * batch);
}

BENCHMARK(BM_Direct)->ArgName("batch")->Arg(1)->Arg(8)->Arg(64)->UseRealTime()->Unit(
    benchmark::kMicrosecond);
BENCHMARK(BM_ReplicaSet)
    ->ArgNames({"batch", "slots"})
    ->ArgsProduct({{1, 8, 64}, {1, 2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace replicad

BENCHMARK_MAIN();
