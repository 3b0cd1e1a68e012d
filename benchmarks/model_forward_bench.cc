// Forward-pass time of one ONNX model at one batch size: in-process (an execution plan run
// directly, and ReplicaSet::Predict over CPU slots) or through a running daemon's Predict
// over gRPC. benchmarks/compare_peers.py runs it next to ONNX Runtime and PyTorch.
//
// Run with:
//   build/benchmarks/model_forward_bench --model resnet18.onnx --batch 32 --threads 2
//   build/benchmarks/model_forward_bench --model resnet18.onnx --batch 32 --threads 1 --slots 2
//   build/benchmarks/model_forward_bench --grpc --server 127.0.0.1:8500 --name m --batch 32
//   build/benchmarks/model_forward_bench --grpc --grpc-client both --server 127.0.0.1:8500 --name m
// (the last two against e.g. `build/bin/replicad serve --model m=resnet18.onnx --devices cpu:0
// --threads-per-slot 2 --listen 127.0.0.1:8500`); benchmarks/compare_peers.py runs all three.
//
// In-process, --slots S slots on --device (default cpu:0; e.g. cuda:0, --tf32 for TF32)
// serve the model, CPU slots with --threads T OpenMP threads each (S*T threads in all);
// GPU slots cut slices into up to --transfer-chunks chunks, merged on --merge-device
// (cpu:0, or a GPU by peer copies). "direct" (one slot only) is ExecutionPlan::Run on the calling
// thread: no stream hop, no split, no merge. "Predict" is ReplicaSet::Predict waited for
// synchronously, as the daemon runs it. --grpc times Predict against --server (request
// built once; each call sends it and parses the response) with --grpc-client: "borrowing"
// (ReplicadClient::PredictBorrowingInputs: the inputs go out as slices of the request's
// bytes), "typed" (ReplicadClient::Predict: serialized first), or "both", alternating
// call by call so that both see the same machine.
// Inputs are deterministic pseudo-random floats; every mode runs --warmup untimed passes
// first (the first also builds the plans), then --iterations timed ones. The table gives
// median, mean and min milliseconds per pass and images per second (batch / median);
// with --json, one last line "json: {...}" repeats it for scripts.
// With --profile (one CPU slot), the plan runs --iterations more passes with every step timed
// (ExecutionPlan's Proceed hook marks each step's start), and a table gives the time a pass
// spends in each op type and the 15 slowest nodes: where to look before changing a kernel.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "benchmarks/bench_timing.h"
#include "client/replicad_client.h"
#include "core/backends/backends.h"
#include "core/base/status_macros.h"
#include "core/device/batch_split.h"
#include "core/model/execution_plan.h"
#include "core/model/onnx_import.h"
#include "core/serve/replica_set.h"
#include "server/replica_set_factory.h"

namespace replicad {
namespace {

// Passes before the predict timing that wait for a wide plan's background build.
constexpr int kMaxPassesUntilWide = 500;

struct Options {
  std::string model_path;
  std::string name = "m";
  int64_t batch = 1;
  int threads = 1;
  int slots = 1;
  std::string device = "cpu:0";
  bool tf32 = false;
  bool cuda_graphs = false;
  std::string precision = "fp32";  // Of the model's products, as the daemon's --precision.
  bool winograd = true;
  bool lend_idle_cores = true;
  int transfer_chunks = 4;
  std::string merge_device = "cpu:0";
  int iterations = 20;
  int warmup = 3;
  bool grpc = false;
  std::string grpc_client = "borrowing";
  std::string server;
  bool json = false;
  bool profile = false;
  int profile_nodes = 15;  // Slowest nodes --profile lists.
};

// The model's input shape with dim 0 set to the batch; other open dims are an error.
absl::StatusOr<Shape> BatchShape(const std::string& input, Shape shape, int64_t batch) {
  if (shape.empty()) return absl::InvalidArgumentError(input + ": rank 0 input has no batch dim");
  shape[0] = batch;
  for (int64_t d : shape) {
    if (d == kAnyDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(input, ": dims other than 0 are not fixed: ", ShapeToString(shape)));
    }
  }
  return shape;
}

class HostSink : public OutputSink {
 public:
  explicit HostSink(size_t outputs) : buffers_(outputs) {}
  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override {
    // Reused across passes (the daemon allocates a response per call; the gRPC figures
    // include that).
    if (buffers_[index].buffer() == nullptr || !(buffers_[index].type() == type)) {
      buffers_[index] = Tensor::Host(type.dtype, type.shape);
    }
    return buffers_[index].raw_data();
  }

 private:
  std::vector<Tensor> buffers_;
};

// --profile: `passes` more direct runs, each step timed from the Proceed
// call before it to the one after (the CPU backend runs a step to completion
// before the next is asked for); prints the time per pass by op type and the
// `nodes` slowest nodes.
absl::Status PrintProfile(ExecutionPlan& plan, const std::vector<const void*>& inputs,
                          const std::vector<void*>& outputs, int passes, int nodes) {
  std::vector<double> step_ms(plan.step_count(), 0.0);
  for (int pass = 0; pass < passes; ++pass) {
    size_t next = 0;
    auto last = std::chrono::steady_clock::now();
    auto mark = [&] {
      const auto now = std::chrono::steady_clock::now();
      if (next > 0)
        step_ms[next - 1] += std::chrono::duration<double, std::milli>(now - last).count();
      last = std::chrono::steady_clock::now();
      ++next;
    };
    REPLICAD_RETURN_IF_ERROR(plan.Run(inputs.data(), outputs.data(), [&] {
      mark();
      return absl::OkStatus();
    }));
    mark();  // The last step ends with Run.
  }
  std::map<std::string, std::pair<double, int>> by_op;
  std::vector<std::pair<double, size_t>> by_step;
  double total = 0;
  for (size_t i = 0; i < step_ms.size(); ++i) {
    const double ms = step_ms[i] / passes;
    by_op[plan.step_node(i).op_type].first += ms;
    by_op[plan.step_node(i).op_type].second += 1;
    by_step.push_back({ms, i});
    total += ms;
  }
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [op, entry] : by_op) ops.push_back({entry.first, op});
  std::sort(ops.rbegin(), ops.rend());
  std::cout << absl::StrFormat("profile: %d steps, %.3f ms a pass (%d passes)\n", step_ms.size(),
                               total, passes);
  std::cout << "| op type | steps | ms a pass | share |\n| --- | ---: | ---: | ---: |\n";
  for (const auto& [ms, op] : ops) {
    std::cout << absl::StrFormat("| %s | %d | %.3f | %.1f%% |\n", op, by_op[op].second, ms,
                                 100 * ms / total);
  }
  std::sort(by_step.rbegin(), by_step.rend());
  std::cout << "| slowest node | op type | ms a pass |\n| --- | --- | ---: |\n";
  for (size_t i = 0; i < std::min<size_t>(nodes, by_step.size()); ++i) {
    const Node& node = plan.step_node(by_step[i].second);
    std::cout << absl::StrFormat("| %s | %s | %.3f |\n", node.name, node.op_type, by_step[i].first);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Timing>> RunInProcess(const Options& options) {
  absl::StatusOr<ComputePrecision> precision =
      ParseComputePrecision(options.precision, "--precision");
  if (!precision.ok()) return precision.status();
  OnnxImportOptions import;
  import.precision = *precision;
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxFile(options.model_path, options.name, import);
  if (!model.ok()) return model.status();
  std::vector<Tensor> inputs;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < (*model)->inputs().size(); ++i) {
    const TensorSpec& spec = (*model)->inputs()[i];
    absl::StatusOr<Shape> shape = BatchShape(spec.name, spec.type.shape, options.batch);
    if (!shape.ok()) return shape.status();
    shapes.push_back(*shape);
    inputs.push_back(Tensor::Host(spec.type.dtype, *shape));
    FillInput(spec.type.dtype, inputs.back().raw_data(), inputs.back().num_elements(), 1000 + i);
  }

  absl::StatusOr<DeviceId> device_id = ParseDeviceId(options.device);
  if (!device_id.ok()) return device_id.status();
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  if (!devices.ok()) return devices.status();
  const DeviceInfo* device = FindDevice(*devices, *device_id);
  if (device == nullptr) return absl::NotFoundError(options.device + " is not present");
  // As the daemon makes them (BuildReplicaSet): with slots of one thread, a
  // wide replica lends a one-slice batch the idle slots' cores.
  ServingOptions serving;
  serving.slot_options.threads_per_slot = options.threads;
  serving.slot_options.tf32 = options.tf32;
  serving.slot_options.cuda_graphs = options.cuda_graphs;
  serving.slot_options.winograd = options.winograd;
  serving.slot_options.lend_idle_cores = options.lend_idle_cores;
  for (int i = 0; i < options.slots; ++i) {
    serving.slots.push_back(SlotAssignment{"r" + std::to_string(i), device->id, 1});
  }
  absl::StatusOr<DeviceId> merge_id = ParseDeviceId(options.merge_device);
  if (!merge_id.ok()) return merge_id.status();
  serving.merge_device = *merge_id;
  serving.transfer_chunks = options.transfer_chunks;
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
      BuildReplicaSet(*model, *devices, serving, /*observer=*/nullptr);
  if (!set.ok()) return set.status();

  std::vector<Timing> timings;
  // "direct" runs the plan on the caller's thread with host pointers: CPU slots only.
  if (options.slots == 1 && device->id.kind == DeviceKind::kCpu) {
    absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = (*set)->replicas()[0]->PlanFor(shapes);
    if (!plan.ok()) return plan.status();
    std::vector<Tensor> outputs;
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs;
    for (const Tensor& t : inputs) in_ptrs.push_back(t.raw_data());
    // A data-dependent plan (a detection model's post-processing) hands its
    // outputs over as host tensors of the request's shapes.
    const bool data_dependent = (*plan)->data_dependent();
    for (const TensorType& type :
         data_dependent ? std::vector<TensorType>{} : (*plan)->output_types()) {
      outputs.push_back(Tensor::Host(type.dtype, type.shape));
      out_ptrs.push_back(outputs.back().raw_data());
    }
    // On a thread of its own that ends before Predict is timed: libgomp keeps
    // an idle team for every thread that ran a parallel region, and with more
    // team threads than cores it stops spinning between regions, which made
    // the slot's 2 threads 2-4x slower than 1 on small layers (batch 1).
    absl::StatusOr<Timing> direct = absl::InternalError("direct pass did not run");
    std::thread runner([&] {
      omp_set_num_threads(options.threads);  // As the slot's own thread runs it.
      direct = Measure("direct", options.warmup, options.iterations, [&] {
        return data_dependent ? (*plan)->RunToHost(in_ptrs.data(), &outputs)
                              : (*plan)->Run(in_ptrs.data(), out_ptrs.data());
      });
    });
    runner.join();
    if (!direct.ok()) return direct.status();
    timings.push_back(*direct);
    if (options.profile && !data_dependent) {
      absl::Status profiled;
      std::thread profiler([&] {
        omp_set_num_threads(options.threads);
        profiled =
            PrintProfile(**plan, in_ptrs, out_ptrs, options.iterations, options.profile_nodes);
      });
      profiler.join();
      if (!profiled.ok()) return profiled;
    }
  }
  HostSink sink((*model)->outputs().size());
  // Split as the scheduler splits an unmeasured batch, and a batch on one
  // slot marked to borrow the idle slots' cores, as it marks one when the
  // others are idle (here they always are).
  std::vector<BatchSlice> slices =
      SplitBatch(options.batch, std::vector<double>(options.slots, 1.0));
  if (slices.size() == 1) slices[0].widened = (*set)->LendsIdleCores();
  bool widened = false;
  const auto predict_once = [&]() -> absl::Status {
    absl::Status status;
    absl::Notification done;
    (*set)->Run(inputs, slices, &sink, nullptr, [&](absl::Status s, std::vector<BatchSlice> ran) {
      status = s;
      widened = ran.size() == 1 && ran[0].widened;
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  };
  // A one-slice batch runs narrow until the wide replica's plan, built in
  // the background, is there: the timed passes are of the steady state.
  if ((*set)->wide() != nullptr) {
    for (int pass = 0; pass < kMaxPassesUntilWide && !widened; ++pass) {
      REPLICAD_RETURN_IF_ERROR(predict_once());
    }
    std::cerr << (widened ? "the idle slots' cores are lent to this batch\n"
                          : "the batch runs on its slots alone\n");
  }
  absl::StatusOr<Timing> predict =
      Measure("predict", options.warmup, options.iterations, predict_once);
  if (!predict.ok()) return predict.status();
  timings.push_back(*predict);
  return timings;
}

absl::StatusOr<std::vector<Timing>> RunGrpc(const Options& options) {
  client::ClientOptions client_options;
  client_options.deadline = absl::Minutes(10);
  absl::StatusOr<std::unique_ptr<client::ReplicadClient>> client =
      client::ReplicadClient::Connect(options.server, client_options);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::ModelInfo> info = (*client)->GetModel(options.name);
  if (!info.ok()) return info.status();
  v1::PredictRequest request;
  request.set_model(options.name);
  for (int i = 0; i < info->inputs_size(); ++i) {
    const v1::TensorSpec& spec = info->inputs(i);
    absl::StatusOr<DType> dtype = DTypeFromOnnx(spec.dtype());
    if (!dtype.ok()) return dtype.status();
    absl::StatusOr<Shape> shape =
        BatchShape(spec.name(), Shape(spec.shape().begin(), spec.shape().end()), options.batch);
    if (!shape.ok()) return shape.status();
    v1::Tensor* tensor = request.add_inputs();
    tensor->set_name(spec.name());
    tensor->set_dtype(spec.dtype());
    for (int64_t d : *shape) tensor->add_shape(d);
    Tensor values = Tensor::Host(*dtype, *shape);
    FillInput(*dtype, values.raw_data(), values.num_elements(), 1000 + i);
    tensor->set_raw(values.raw_data(), values.byte_size());
  }
  const auto borrowing = [&]() -> absl::Status {
    return (*client)->PredictBorrowingInputs(request).status();
  };
  const auto typed = [&]() -> absl::Status { return (*client)->Predict(request).status(); };
  if (options.grpc_client != "both") {
    absl::StatusOr<Timing> grpc =
        options.grpc_client == "typed"
            ? Measure("grpc_typed", options.warmup, options.iterations, typed)
            : Measure("grpc", options.warmup, options.iterations, borrowing);
    if (!grpc.ok()) return grpc.status();
    return std::vector<Timing>{*grpc};
  }
  // Both clients, one call each in turn: each Measure times a single pass.
  const std::function<absl::Status()> clients[2] = {typed, borrowing};
  std::vector<std::vector<double>> ms(2);
  for (int i = 0; i < options.warmup + options.iterations; ++i) {
    for (int c = 0; c < 2; ++c) {
      absl::StatusOr<Timing> pass = Measure("", 0, 1, clients[c]);
      if (!pass.ok()) return pass.status();
      if (i >= options.warmup) ms[c].push_back(pass->median_ms);
    }
  }
  std::vector<Timing> timings;
  for (int c = 0; c < 2; ++c) {
    std::vector<double>& v = ms[c];
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    timings.push_back({c == 0 ? "grpc_typed" : "grpc",
                       n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2,
                       std::accumulate(v.begin(), v.end(), 0.0) / n, v.front()});
  }
  return timings;
}

std::string Describe(const Timing& t, const Options& options) {
  if (t.mode == "direct") return "direct (ExecutionPlan::Run)";
  if (t.mode == "predict") return absl::StrCat("Predict (ReplicaSet, ", options.slots, " slot(s))");
  if (t.mode == "grpc_typed") return absl::StrCat("gRPC, typed client (", options.server, ")");
  return absl::StrCat("gRPC, borrowing client (", options.server, ")");
}

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"Forward-pass time of an ONNX model in replicad, in-process or over gRPC"};
  app.add_option("--model", options.model_path, "ONNX file (in-process mode)");
  app.add_option("--name", options.name, "Model name (its name in the daemon for --grpc)")
      ->capture_default_str();
  app.add_option("--batch", options.batch, "Rows per pass")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", options.threads, "OpenMP threads per slot")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--slots", options.slots, "CPU slots (in-process mode)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--device", options.device, "Device of every slot (in-process mode), e.g. cuda:0")
      ->capture_default_str();
  app.add_flag("--tf32", options.tf32, "CUDA slots: TF32 tensor cores");
  app.add_flag("--cuda-graphs", options.cuda_graphs,
               "CUDA slots: plans' runs recorded as CUDA graphs (as the daemon's flag)");
  app.add_option("--precision", options.precision,
                 "In-process: what the model's convolutions and weight products compute in "
                 "(fp32, bf16, fp16 or tf32, as the daemon's flag)")
      ->capture_default_str();
  app.add_flag("--winograd,!--no-winograd", options.winograd,
               "CPU slots: Winograd 3x3 convolutions where oneDNN has them (default on)");
  app.add_flag("--lend-idle-cores,!--no-lend-idle-cores", options.lend_idle_cores,
               "CPU slots of one thread: a one-slice batch runs with the idle slots' cores "
               "(as the daemon's flag)");
  app.add_option("--transfer-chunks", options.transfer_chunks,
                 "CUDA slots: most chunks a slice's copies overlap in (1: whole slices)")
      ->capture_default_str();
  app.add_option("--merge-device", options.merge_device, "Where outputs are merged (in-process)")
      ->capture_default_str();
  app.add_option("--iterations", options.iterations, "Timed passes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "Untimed passes first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--grpc", options.grpc, "Time Predict through --server instead");
  app.add_option("--server", options.server, "HOST:PORT of a running replicad (--grpc)");
  app.add_option("--grpc-client", options.grpc_client,
                 "--grpc: borrowing (inputs sent from the request's bytes), typed (serialized "
                 "first) or both, call by call in turn")
      ->capture_default_str()
      ->check(CLI::IsMember({"borrowing", "typed", "both"}));
  app.add_flag("--json", options.json, "Print a last line 'json: {...}' for scripts");
  app.add_flag("--profile", options.profile,
               "With one CPU slot: time every step of the plan and print where a pass goes");
  app.add_option("--profile-nodes", options.profile_nodes, "--profile: slowest nodes listed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (options.grpc ? options.server.empty() : options.model_path.empty()) {
    std::cerr << "model_forward_bench: "
              << (options.grpc ? "--grpc needs --server" : "--model is required") << "\n";
    return 2;
  }

  absl::StatusOr<std::vector<Timing>> timings =
      options.grpc ? RunGrpc(options) : RunInProcess(options);
  if (!timings.ok()) {
    std::cerr << "model_forward_bench: " << timings.status() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "model %s  batch %d  %s  %d iterations (+%d warm-up)\n",
      options.grpc ? options.name : options.model_path, options.batch,
      options.grpc ? "via the daemon's slots"
                   : absl::StrFormat("%d slot(s) x %d thread(s)", options.slots, options.threads),
      options.iterations, options.warmup);
  std::cout << absl::StrFormat("| %-40s | %9s | %9s | %9s | %9s |\n", "path", "median ms",
                               "mean ms", "min ms", "images/s");
  std::cout << "| ---------------------------------------- | --------: | --------: | --------: "
               "| --------: |\n";
  std::vector<std::string> json;
  for (const Timing& t : *timings) {
    const double images_per_s = options.batch * 1000.0 / t.median_ms;
    std::cout << absl::StrFormat("| %-40s | %9.3f | %9.3f | %9.3f | %9.1f |\n",
                                 Describe(t, options), t.median_ms, t.mean_ms, t.min_ms,
                                 images_per_s);
    json.push_back(
        absl::StrFormat("\"%s\": {\"median_ms\": %.6f, \"mean_ms\": %.6f, \"min_ms\": %.6f, "
                        "\"images_per_s\": %.3f}",
                        t.mode, t.median_ms, t.mean_ms, t.min_ms, images_per_s));
  }
  if (options.json) std::cout << "json: {" << absl::StrJoin(json, ", ") << "}\n";
  return 0;
}

}  // namespace
}  // namespace replicad

int main(int argc, char** argv) { return replicad::Main(argc, argv); }
