// Training-step time of one ONNX model: DataParallelTrainer::Step in-process
// (split, forward, loss, backward, gradient reduction, optimizer update) on
// --slots slots of --device, with softmax cross-entropy on the model's first
// output and SGD with momentum. benchmarks/compare_gpu.py runs it next to
// PyTorch's training step.
//
// Run with:
//   build/benchmarks/train_step_bench --model resnet50_train.onnx --device cuda:0 --batch 128
//   build/benchmarks/train_step_bench --model m.onnx --device cpu:0 --slots 2 --batch 32
// The model must hold its BatchNormalization and Dropout nodes in training form (as
// torch.onnx.export writes them with training=TrainingMode.TRAINING). Inputs are
// deterministic pseudo-random floats and labels, two batches taken in turn as a data
// loader hands out batches; with --prefetch (the default) the next one is posted
// (ModelTrainer::ExpectBatchesFrom) so GPU slots upload it while a step computes, as
// TrainSteps does for a streaming client. --warmup untimed steps run first (the
// first also builds the plans), then --iterations timed ones. Prints median, mean and min
// milliseconds per step and images per second, the medians of the trainer's phases
// (forward, backward, host reduction, optimizer) and the gradient bytes a slot sends to the
// reduction (benchmarks/scaling_model.py reads them); with --json, one last line "json: {...}".
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/bench_timing.h"
#include "core/backends/backends.h"
#include "core/model/onnx_import.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/upcoming_batch.h"

namespace replicad {
namespace {

struct Options {
  std::string model_path;
  int64_t batch = 32;
  int slots = 1;
  std::string device = "cpu:0";
  bool tf32 = false;
  bool cudnn_deterministic = true;
  std::string precision = "fp32";
  int threads = 1;
  int iterations = 10;
  int warmup = 2;
  bool json = false;
  bool prefetch = true;
};

// What the trainer reports of its steps (the timed ones): medians of its
// phases and the gradient bytes each slot sends to the reduction.
struct StepPhases {
  std::vector<double> forward_ms, backward_ms, reduce_ms, optimizer_ms;
  int64_t gradient_bytes_per_slot = 0;
  int prefetched_steps = 0;  // Timed steps whose slot 0 read rows uploaded ahead.
};

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

absl::StatusOr<Timing> Run(const Options& options, StepPhases* phases) {
  OnnxImportOptions import;
  import.optimize = false;  // Training needs the graph as written.
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxFile(options.model_path, "m", import);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return devices.status();
  absl::StatusOr<DeviceId> id = ParseDeviceId(options.device);
  if (!id.ok()) return id.status();
  const DeviceInfo* info = FindDevice(*devices, *id);
  if (info == nullptr) return absl::NotFoundError(options.device + ": no such device here");
  std::vector<TrainerSlot> slots;
  for (int s = 0; s < options.slots; ++s) {
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(
        *info, SlotOptions{options.threads, true, options.tf32, true, options.cudnn_deterministic});
    if (!device.ok()) return device.status();
    slots.push_back({SlotAssignment{absl::StrCat("r", s), *id, 1.0}, *std::move(device)});
  }
  const Graph& graph = (*model)->graph();
  TrainerOptions trainer_options;
  trainer_options.loss = {LossSpec::Kind::kSoftmaxCrossEntropy,
                          graph.values[graph.outputs[0]].name};
  trainer_options.optimizer.learning_rate = 0.01f;
  trainer_options.optimizer.momentum = 0.9f;
  absl::StatusOr<ComputePrecision> precision =
      ParseComputePrecision(options.precision, "--precision");
  if (!precision.ok()) return precision.status();
  trainer_options.precision = *precision;
  TrainerReduction reduction;
  reduction.slot_all_reduce = &CreateSlotAllReduce;
  absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
      DataParallelTrainer::Create(*model, std::move(slots), trainer_options, std::move(reduction));
  if (!trainer.ok()) return trainer.status();

  // Two batches, as a data loader's are: the step on one uploads the other.
  std::vector<std::shared_ptr<UpcomingBatch>> batches;
  const Shape& logits = graph.values[graph.outputs[0]].type.shape;
  const int64_t classes = logits.size() == 2 && logits[1] > 0 ? logits[1] : 1;
  for (int b = 0; b < 2; ++b) {
    auto batch = std::make_shared<UpcomingBatch>();
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      Shape shape = graph.values[graph.inputs[i]].type.shape;
      if (shape.empty()) return absl::InvalidArgumentError("a rank-0 input has no batch dim");
      shape[0] = options.batch;
      for (int64_t d : shape) {
        if (d == kAnyDim) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input ", i, ": dims other than 0 must be fixed: ", ShapeToString(shape)));
        }
      }
      Tensor t = Tensor::Host(DType::kFloat32, shape);
      FillRandom(t.data<float>(), t.num_elements(), 7 + i + 100 * b);
      batch->inputs.push_back(std::move(t));
    }
    batch->targets = Tensor::Host(DType::kInt64, {options.batch});
    for (int64_t r = 0; r < options.batch; ++r) {
      batch->targets.data<int64_t>()[r] = (r * 7 + b) % classes;
    }
    batches.push_back(std::move(batch));
  }
  auto upcoming = std::make_shared<UpcomingBatches>();
  if (options.prefetch) (*trainer)->ExpectBatchesFrom(upcoming);
  int next = 0;
  return Measure("train_step", options.warmup, options.iterations, [&]() -> absl::Status {
    const UpcomingBatch& batch = *batches[next];
    next = 1 - next;
    upcoming->Expect(batches[next]);
    absl::StatusOr<DataParallelTrainer::StepResult> step =
        (*trainer)->Step(batch.inputs, batch.targets);
    if (!step.ok()) return step.status();
    // Slot 0's slice stands for all (they run concurrently on equal slices).
    const DataParallelTrainer::SliceResult& first = step->slices.front();
    phases->forward_ms.push_back(first.forward_seconds * 1e3);
    phases->backward_ms.push_back((first.compute_seconds - first.forward_seconds) * 1e3);
    phases->reduce_ms.push_back(step->reduce_seconds * 1e3);
    phases->optimizer_ms.push_back(step->optimizer_seconds * 1e3);
    if (first.input_prefetched) ++phases->prefetched_steps;
    phases->gradient_bytes_per_slot =
        step->reduced_bytes / static_cast<int64_t>(step->slices.size());
    return absl::OkStatus();
  });
}

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"Training-step time of an ONNX model in replicad (DataParallelTrainer)"};
  app.add_option("--model", options.model_path, "ONNX file (training-form BatchNorm/Dropout)")
      ->required();
  app.add_option("--batch", options.batch, "Rows per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--slots", options.slots, "Slots on --device")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--device", options.device, "Device of every slot, e.g. cuda:0")
      ->capture_default_str();
  app.add_flag("--tf32", options.tf32, "CUDA slots: TF32 tensor cores");
  app.add_option("--precision", options.precision, "Training precision: fp32, bf16, fp16, tf32");
  app.add_flag("--cudnn-deterministic,!--no-cudnn-deterministic", options.cudnn_deterministic,
               "CUDA slots: reproducible cuDNN convolution algorithms (default on)");
  app.add_option("--threads", options.threads, "CPU slots: OpenMP threads per slot")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--iterations", options.iterations, "Timed steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "Untimed steps first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--prefetch,!--no-prefetch", options.prefetch,
               "Post the next batch so GPU slots upload it during a step (default on)");
  app.add_flag("--json", options.json, "Print a last line 'json: {...}' for scripts");
  CLI11_PARSE(app, argc, argv);

  StepPhases phases;
  absl::StatusOr<Timing> t = Run(options, &phases);
  if (!t.ok()) {
    std::cerr << "train_step_bench: " << t.status() << "\n";
    return 1;
  }
  const double images_per_s = options.batch * 1000.0 / t->median_ms;
  std::cout << absl::StrFormat(
      "model %s  batch %d  %d slot(s) on %s%s  %d iterations (+%d warm-up)\n"
      "train step: median %.3f ms, mean %.3f ms, min %.3f ms, %.1f images/s\n",
      options.model_path, options.batch, options.slots, options.device,
      std::string(options.tf32 ? " (TF32)" : "") +
          (options.cudnn_deterministic ? "" : " (non-deterministic cuDNN)"),
      options.iterations, options.warmup, t->median_ms, t->mean_ms, t->min_ms, images_per_s);
  std::cout << absl::StrFormat(
      "phases (medians, slot 0): forward %.3f ms, backward %.3f ms, host reduction %.3f ms, "
      "optimizer %.3f ms; gradients %d bytes per slot; inputs uploaded ahead in %d of %d "
      "steps\n",
      Median(phases.forward_ms), Median(phases.backward_ms), Median(phases.reduce_ms),
      Median(phases.optimizer_ms), phases.gradient_bytes_per_slot, phases.prefetched_steps,
      static_cast<int>(phases.forward_ms.size()));
  if (options.json) {
    std::cout << absl::StrFormat(
        "json: {\"train_step\": {\"median_ms\": %.6f, \"mean_ms\": %.6f, \"min_ms\": %.6f, "
        "\"images_per_s\": %.3f, \"forward_ms\": %.6f, \"backward_ms\": %.6f, "
        "\"reduce_ms\": %.6f, \"optimizer_ms\": %.6f, \"gradient_bytes_per_slot\": %d, "
        "\"prefetched_steps\": %d}}\n",
        t->median_ms, t->mean_ms, t->min_ms, images_per_s, Median(phases.forward_ms),
        Median(phases.backward_ms), Median(phases.reduce_ms), Median(phases.optimizer_ms),
        phases.gradient_bytes_per_slot, phases.prefetched_steps);
  }
  return 0;
}

}  // namespace
}  // namespace replicad

int main(int argc, char** argv) { return replicad::Main(argc, argv); }
