// Model parallelism (core/serve/pipeline_replica.h) against one stage:
// PipelineReplica::Run in-process, the model placed by --placement over
// --contexts contexts (dev0, dev1, ... on --device, --threads threads each),
// the batch cut into --micro-batches micro-batches, next to the same model
// placed whole on dev0 and run whole (one stage, one slot of --threads
// threads). Prints both medians, the throughput ratio (one stage's time over
// the pipeline's) and, per part of the pipeline, its busy time per pass and
// the rest of the pass (its bubble: waiting on the parts before it).
//
// `--placement auto` cuts as the daemon's does (auto_placement.h).
//
// --train times a training step instead (core/serve/pipeline_trainer.h, SGD
// with momentum): the pipeline trainer over the contexts against one
// DataParallelTrainer slot of --threads threads, on the same batches. The
// loss is cross-entropy over the first output's classes (int64 labels)
// where it is [N, C], mean squared error otherwise.
//
// Run with:
//   build/benchmarks/pipeline_bench --model resnet50.onnx
//       --placement '/conv1/*->dev0; /layer3/layer3.2/*->dev1' --batch 64 --micro-batches 8
//   build/benchmarks/pipeline_bench --example theano --batch 256
// --example theano builds Theano's multi-GPU example in-process: x feeds two
// independent 2048 x 2048 products placed on dev0 and dev1, summed on dev0.
// The model's first input gets --batch rows and its other dims as declared.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/bench_timing.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/serve/auto_placement.h"
#include "core/serve/pipeline_replica.h"
#include "core/serve/pipeline_trainer.h"
#include "core/train/data_parallel_trainer.h"

namespace replicad {
namespace {

struct Options {
  std::string model_path;
  std::string example;
  std::string placement;
  int contexts = 2;
  int threads = 1;
  int64_t batch = 64;
  int micro_batches = 8;
  int iterations = 5;
  int warmup = 1;
  bool train = false;
};

std::string TheanoExampleOnnx() {
  constexpr int64_t kWidth = 2048;
  OnnxModelBuilder b("theano_two_products", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, kWidth});
  for (const char* side : {"left", "right"}) {
    Tensor w = Tensor::Host(DType::kFloat32, {kWidth, kWidth});
    FillRandom(w.data<float>(), w.num_elements(), side[0]);
    b.AddInitializer(absl::StrCat("w_", side), w);
    b.AddNode("MatMul", {"x", absl::StrCat("w_", side)}, {side});
  }
  b.AddNode("Add", {"left", "right"}, {"y"});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kWidth});
  return b.Serialize();
}

absl::StatusOr<std::unique_ptr<PipelineReplica>> Place(std::shared_ptr<const Model> model,
                                                       const std::string& rules, int contexts,
                                                       int threads) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<SlotAssignment> slots;
  std::vector<std::string> names;
  for (int c = 0; c < contexts; ++c) {
    slots.push_back(SlotAssignment{absl::StrCat("dev", c), cpu.id, 1});
    names.push_back(slots.back().name);
  }
  absl::StatusOr<PlacedGraph> placed;
  if (rules == "auto") {
    // As the daemon's --placement auto: costs measured at 8 rows on a CPU slot.
    absl::StatusOr<NodeCosts> costs =
        MeasureNodeCosts(model, CreateCpuDevice(cpu, CpuSlotOptions{threads}), 8);
    if (!costs.ok()) return costs.status();
    absl::StatusOr<std::vector<std::string>> context_of =
        BalancedContexts(model->graph(), *costs, names);
    if (!context_of.ok()) return context_of.status();
    placed = PlaceNodes(model->graph(), *context_of);
  } else {
    absl::StatusOr<std::vector<PlacementRule>> parsed = ParsePlacement(rules, "--placement");
    if (!parsed.ok()) return parsed.status();
    placed = PlaceGraph(model->graph(), *parsed, names);
  }
  if (!placed.ok()) return placed.status();
  return PipelineReplica::Create(
      std::move(model), *std::move(placed), slots,
      [cpu, threads](const SlotAssignment&) -> absl::StatusOr<std::unique_ptr<Device>> {
        return CreateCpuDevice(cpu, CpuSlotOptions{threads});
      });
}

// One SGD step's loss and targets for `model`: cross-entropy over the first
// output's classes, or mean squared error against random targets.
TrainerOptions TrainingOf(const Model& model, int64_t batch, Tensor* targets) {
  TrainerOptions options;
  options.optimizer.learning_rate = 0.01f;
  options.optimizer.momentum = 0.9f;
  const TensorSpec& output = model.outputs()[0];
  options.loss.output = output.name;
  if (output.type.shape.size() == 2 && output.type.shape[1] > 0) {
    *targets = Tensor::Host(DType::kInt64, {batch});
    for (int64_t i = 0; i < batch; ++i) targets->data<int64_t>()[i] = i % output.type.shape[1];
    return options;
  }
  options.loss.kind = LossSpec::Kind::kMeanSquaredError;
  options.loss.target_dtype = DType::kFloat32;
  Shape shape = output.type.shape;
  for (int64_t& d : shape) d = d < 0 ? batch : d;
  *targets = Tensor::Host(DType::kFloat32, shape);
  FillRandom(targets->data<float>(), targets->num_elements(), 9);
  return options;
}

// --train: the pipeline trainer against one slot's step.
int MainTrain(const Options& options, const std::string& placement, const Tensor& x) {
  OnnxImportOptions import;
  import.optimize = false;  // Training reads the graph as written.
  absl::StatusOr<std::shared_ptr<const Model>> model =
      options.example == "theano"
          ? LoadOnnxBytes(TheanoExampleOnnx(), "theano", "<theano example>", import)
          : LoadOnnxFile(options.model_path, "model", import);
  if (!model.ok()) {
    std::cerr << "pipeline_bench: " << model.status() << "\n";
    return 1;
  }
  Tensor targets;
  const TrainerOptions training = TrainingOf(**model, options.batch, &targets);
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<TrainerSlot> slot;
  slot.push_back(
      {SlotAssignment{"r0", cpu.id, 1}, CreateCpuDevice(cpu, CpuSlotOptions{options.threads})});
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> one =
      DataParallelTrainer::Create(*model, std::move(slot), training, {});
  std::vector<SlotAssignment> contexts;
  std::vector<std::string> names;
  for (int c = 0; c < options.contexts; ++c) {
    contexts.push_back(SlotAssignment{absl::StrCat("dev", c), cpu.id, 1});
    names.push_back(contexts.back().name);
  }
  absl::StatusOr<std::vector<PlacementRule>> rules = ParsePlacement(placement, "--placement");
  absl::StatusOr<std::vector<std::string>> context_of =
      rules.ok() ? NodeContexts((*model)->graph(), *rules, names)
                 : absl::StatusOr<std::vector<std::string>>(rules.status());
  absl::StatusOr<std::unique_ptr<PipelineTrainer>> piped =
      context_of.ok() ? PipelineTrainer::Create(
                            *model, *context_of, {contexts},
                            [cpu, threads = options.threads](
                                const SlotAssignment&) -> absl::StatusOr<std::unique_ptr<Device>> {
                              return CreateCpuDevice(cpu, CpuSlotOptions{threads});
                            },
                            training, options.micro_batches)
                      : absl::StatusOr<std::unique_ptr<PipelineTrainer>>(context_of.status());
  if (!one.ok() || !piped.ok()) {
    std::cerr << "pipeline_bench: " << (one.ok() ? piped.status() : one.status()) << "\n";
    return 1;
  }
  absl::StatusOr<Timing> one_step = Measure("one slot", options.warmup, options.iterations,
                                            [&] { return (*one)->Step({x}, targets).status(); });
  absl::StatusOr<Timing> piped_step = Measure("pipeline", options.warmup, options.iterations, [&] {
    return (*piped)->Step({x}, targets).status();
  });
  if (!one_step.ok() || !piped_step.ok()) {
    std::cerr << "pipeline_bench: " << (one_step.ok() ? piped_step.status() : one_step.status())
              << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "training step, model %s, batch %d, %d context(s) of %d thread(s), %d micro-batch(es), "
      "%d steps (+%d warm-up)\n",
      options.example.empty() ? options.model_path : options.example, options.batch,
      options.contexts, options.threads, (*piped)->micro_batches(), options.iterations,
      options.warmup);
  std::cout << absl::StrFormat("one slot: median %.2f ms\npipeline: median %.2f ms\n",
                               one_step->median_ms, piped_step->median_ms);
  std::cout << absl::StrFormat("throughput, pipeline / one slot: %.2fx\n",
                               one_step->median_ms / piped_step->median_ms);
  return 0;
}

int Main(const Options& options) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      options.example == "theano" ? LoadOnnxBytes(TheanoExampleOnnx(), "theano", "<theano example>")
                                  : LoadOnnxFile(options.model_path, "model");
  if (!model.ok()) {
    std::cerr << "pipeline_bench: " << model.status() << "\n";
    return 1;
  }
  const std::string placement = options.example == "theano" && options.placement.empty()
                                    ? "left->dev0; right->dev1"
                                    : options.placement;
  const TensorSpec& spec = (*model)->inputs()[0];
  Shape shape = spec.type.shape;
  shape[0] = options.batch;
  Tensor x = Tensor::Host(spec.type.dtype, shape);
  FillRandom(x.data<float>(), x.num_elements(), 7);
  if (options.train) return MainTrain(options, placement, x);

  absl::StatusOr<std::unique_ptr<PipelineReplica>> whole =
      Place(*model, "*->dev0", 1, options.threads);
  absl::StatusOr<std::unique_ptr<PipelineReplica>> pipeline =
      Place(*model, placement, options.contexts, options.threads);
  for (const auto* made : {&whole, &pipeline}) {
    if (!made->ok()) {
      std::cerr << "pipeline_bench: " << made->status() << "\n";
      return 1;
    }
  }
  absl::StatusOr<Timing> one = Measure("one stage", options.warmup, options.iterations,
                                       [&] { return (*whole)->Run({x}, 1).status(); });
  const std::vector<PipelineReplica::PartStats> before = (*pipeline)->Stats();
  absl::StatusOr<Timing> piped = Measure("pipeline", options.warmup, options.iterations, [&] {
    return (*pipeline)->Run({x}, options.micro_batches).status();
  });
  for (const auto* timing : {&one, &piped}) {
    if (!timing->ok()) {
      std::cerr << "pipeline_bench: " << timing->status() << "\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat(
      "model %s, batch %d, %d context(s) of %d thread(s), %d micro-batch(es), %d passes "
      "(+%d warm-up)\n",
      options.example.empty() ? options.model_path : options.example, options.batch,
      options.contexts, options.threads, options.micro_batches, options.iterations, options.warmup);
  std::cout << absl::StrFormat("one stage: median %.2f ms\npipeline:  median %.2f ms\n",
                               one->median_ms, piped->median_ms);
  std::cout << absl::StrFormat("throughput, pipeline / one stage: %.2fx\n",
                               one->median_ms / piped->median_ms);
  const std::vector<PipelineReplica::PartStats> after = (*pipeline)->Stats();
  const int passes = options.iterations + options.warmup;
  for (size_t p = 0; p < after.size(); ++p) {
    const double busy_ms = (after[p].busy_seconds - before[p].busy_seconds) * 1000 / passes;
    std::cout << absl::StrFormat(
        "  part %d on %s: busy %.2f ms a pass, the rest %.2f ms; %.1f KiB read from other parts "
        "a pass\n",
        p, after[p].context, busy_ms, piped->mean_ms - busy_ms,
        (after[p].bytes_in - before[p].bytes_in) / 1024.0 / passes);
  }
  return 0;
}

}  // namespace
}  // namespace replicad

int main(int argc, char** argv) {
  replicad::Options options;
  CLI::App app{"Model parallelism: a placed pipeline against one stage"};
  app.add_option("--model", options.model_path, "ONNX model");
  app.add_option("--example", options.example, "theano: Theano's two-product example");
  app.add_option("--placement", options.placement,
                 "PATTERN->CONTEXT rules (placement.h), or auto (auto_placement.h)");
  app.add_option("--contexts", options.contexts, "Contexts dev0, dev1, ...")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", options.threads, "Threads per context")->check(CLI::PositiveNumber);
  app.add_option("--batch", options.batch, "Rows")->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", options.micro_batches, "Micro-batches of the pipeline")
      ->check(CLI::PositiveNumber);
  app.add_option("--iterations", options.iterations, "Timed passes")->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "Untimed passes first")->check(CLI::NonNegativeNumber);
  app.add_flag("--train", options.train,
               "Time a training step (SGD) through the pipeline against one slot's");
  CLI11_PARSE(app, argc, argv);
  if (options.model_path.empty() == options.example.empty()) {
    std::cerr << "pipeline_bench: give --model or --example theano\n";
    return 2;
  }
  return replicad::Main(options);
}
