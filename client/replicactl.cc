// replicactl: command-line client of a replicad server.
//
//   replicactl [--server HOST:PORT] [--timeout SECONDS] devices
//   replicactl ... models
//   replicactl ... model NAME
//   replicactl ... predict --model M --input NAME=FILE.npy [--input ...]
//                          --output-dir DIR [--output NAME ...]
//   replicactl ... train --model M --data DIR --epochs E --batch-size B
//                        [--seed S] [--limit N] [--checkpoint PATH] [--output NAME]
//
// Errors are one line on stderr, "replicactl: <code name>: <message>". Exit
// codes: 0 success, 1 a failed call or file operation, 2 a malformed command line.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/epoch_order.h"
#include "client/idx_dataset.h"
#include "client/npy.h"
#include "client/replicad_client.h"
#include "client/train_progress.h"

namespace replicad::client {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int Fail(const absl::Status& status, int exit_code) {
  std::cerr << "replicactl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return exit_code;
}

// Left-aligned columns separated by two spaces; the first row is the heading.
void PrintTable(const std::vector<std::vector<std::string>>& rows, std::string_view indent = "") {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string DashIfEmpty(std::string s) { return s.empty() ? "-" : s; }

std::string FormatBytes(uint64_t bytes) {
  if (bytes == 0) return "-";
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string DTypeName(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT32:
      return "float32";
    case v1::DATA_TYPE_INT64:
      return "int64";
    case v1::DATA_TYPE_INT32:
      return "int32";
    case v1::DATA_TYPE_INT8:
      return "int8";
    case v1::DATA_TYPE_UINT8:
      return "uint8";
    case v1::DATA_TYPE_BOOL:
      return "bool";
    case v1::DATA_TYPE_FLOAT16:
      return "float16";
    case v1::DATA_TYPE_BFLOAT16:
      return "bfloat16";
    default:
      return absl::StrCat("dtype(", static_cast<int>(dtype), ")");
  }
}

template <typename Dims>
std::string ShapeText(const Dims& shape) {
  std::vector<std::string> dims;
  for (int64_t dim : shape) dims.push_back(dim == -1 ? "?" : absl::StrCat(dim));
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

int RunDevices(ReplicadClient& client) {
  absl::StatusOr<v1::ListDevicesResponse> response = client.ListDevices();
  if (!response.ok()) return Fail(response.status(), kExitFailure);
  std::vector<std::vector<std::string>> rows = {
      {"ID", "KIND", "NAME", "MEMORY", "COMPUTE CAPABILITY", "DRIVER", "RUNTIME", "SLOTS"}};
  for (const v1::DeviceInfo& d : response->devices()) {
    rows.push_back({d.id(), d.kind(), DashIfEmpty(d.name()), FormatBytes(d.memory_bytes()),
                    DashIfEmpty(d.compute_capability()), DashIfEmpty(d.driver_version()),
                    DashIfEmpty(d.runtime_version()), absl::StrCat(d.slots())});
  }
  PrintTable(rows);
  return 0;
}

int RunModels(ReplicadClient& client) {
  absl::StatusOr<v1::ListModelsResponse> response = client.ListModels();
  if (!response.ok()) return Fail(response.status(), kExitFailure);
  std::vector<std::vector<std::string>> rows = {{"NAME", "PATH"}};
  for (const v1::ModelSummary& m : response->models()) rows.push_back({m.name(), m.path()});
  PrintTable(rows);
  return 0;
}

void PrintSpecs(std::string_view title,
                const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs) {
  std::cout << title << ":\n";
  std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE"}};
  for (const v1::TensorSpec& s : specs) {
    rows.push_back({s.name(), DTypeName(s.dtype()), ShapeText(s.shape())});
  }
  PrintTable(rows, "  ");
}

int RunModel(ReplicadClient& client, const std::string& name) {
  absl::StatusOr<v1::ModelInfo> model = client.GetModel(name);
  if (!model.ok()) return Fail(model.status(), kExitFailure);
  std::cout << "name: " << model->name() << "\n"
            << "path: " << model->path() << "\n"
            << "opset: " << model->opset() << "\n";
  PrintSpecs("inputs", model->inputs());
  PrintSpecs("outputs", model->outputs());
  std::cout << "replicas:\n";
  std::vector<std::vector<std::string>> rows = {{"SLOT", "DEVICE", "WEIGHT", "STATE"}};
  for (const v1::ReplicaInfo& r : model->replicas()) {
    rows.push_back({r.slot(), r.device(), absl::StrFormat("%g", r.weight()),
                    r.healthy() ? "ok" : absl::StrCat("out of service: ", r.fault())});
  }
  PrintTable(rows, "  ");
  std::cout << "ready: " << (model->ready() ? "yes" : "no (no healthy slot)") << "\n"
            << "merge device: " << DashIfEmpty(model->merge_device()) << "\n"
            << "max batch: "
            << (model->max_batch_size() == 0 ? std::string("unlimited")
                                             : absl::StrCat(model->max_batch_size()))
            << "\n";
  return 0;
}

struct PredictArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string output_dir;
  std::vector<std::string> outputs;
};

// NAME=FILE pairs, in command-line order. Split at the first '=' because input
// names never contain one but paths may.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseInputs(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const std::string& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input '", arg, "': expected NAME=FILE.npy"));
    }
    std::string name = arg.substr(0, eq);
    for (const auto& [seen, file] : inputs) {
      if (seen == name) {
        return absl::InvalidArgumentError(
            absl::StrCat("--input '", arg, "': input '", name, "' is given twice"));
      }
    }
    inputs.emplace_back(std::move(name), arg.substr(eq + 1));
  }
  return inputs;
}

// Output names come from the server and become file names: refuse any that
// would land outside the output directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

int RunPredict(ReplicadClient& client, const PredictArgs& args) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> inputs =
      ParseInputs(args.inputs);
  if (!inputs.ok()) return Fail(inputs.status(), kExitUsage);

  v1::PredictRequest request;
  request.set_model(args.model);
  for (const auto& [name, file] : *inputs) {
    absl::StatusOr<v1::Tensor> tensor = ReadNpy(file);
    if (!tensor.ok()) return Fail(tensor.status(), kExitFailure);
    tensor->set_name(name);
    *request.add_inputs() = std::move(*tensor);
  }
  for (const std::string& output : args.outputs) request.add_output_names(output);

  // Before the call, so a bad directory does not waste a prediction.
  std::error_code error;
  std::filesystem::create_directories(args.output_dir, error);
  if (error) {
    return Fail(absl::ErrnoToStatus(error.value(),
                                    absl::StrCat(args.output_dir, ": cannot create directory")),
                kExitFailure);
  }

  absl::StatusOr<v1::PredictResponse> response = client.Predict(request);
  if (!response.ok()) return Fail(response.status(), kExitFailure);

  for (const v1::Tensor& output : response->outputs()) {
    if (!IsPlainFileName(output.name())) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("the server returned an output named '", output.name(),
                                   "', which cannot be used as a file name")),
                  kExitFailure);
    }
    std::string path = (std::filesystem::path(args.output_dir) / (output.name() + ".npy")).string();
    absl::Status status = WriteNpy(path, output);
    if (!status.ok()) return Fail(status, kExitFailure);
    std::cout << "output " << output.name() << ": " << DTypeName(output.dtype()) << " "
              << ShapeText(output.shape()) << " -> " << path << "\n";
  }
  if (response->slices().empty()) {
    std::cout << "split: none reported\n";
  } else {
    std::vector<std::string> parts;
    for (const v1::SliceInfo& s : response->slices()) {
      parts.push_back(
          absl::StrCat(s.slot(), "@", s.device(), " rows [", s.begin(), ", ", s.end(), ")"));
    }
    std::cout << "split: " << absl::StrJoin(parts, ", ") << "\n";
  }
  return 0;
}

// A failed call of `train`, which makes several kinds: the same code, the
// call's name in front of the server's message (which may be empty, as gRPC's
// own UNIMPLEMENTED is).
absl::Status InCall(const char* call, const absl::Status& status) {
  return absl::Status(status.code(), status.message().empty()
                                         ? absl::StrCat(call, " failed")
                                         : absl::StrCat(call, ": ", status.message()));
}

struct TrainArgs {
  std::string model;
  std::string data;
  int64_t epochs = 0;
  int64_t batch_size = 0;
  uint64_t seed = 0;
  std::optional<int64_t> limit;
  std::string checkpoint;
  std::string output;
  // Optimizer: sent with ConfigureTraining (softmax cross-entropy on
  // `output`) when set; otherwise the server's current configuration trains.
  std::string optimizer;
  std::optional<double> learning_rate, momentum, weight_decay;
  bool nesterov = false;
  std::string ps_device;  // Set: reduce through a parameter server there.
  // Periodic numbered checkpoints on the server (with the optimizer).
  int64_t checkpoint_every_steps = 0;
  std::string checkpoint_dir;
  std::string
      precision;  // Set: what the forward pass's products compute in (fp32, bf16, fp16, tf32).
  // A job started with --rank-shards: this client feeds rank `rank` of
  // `world_size` its rows of every step (-1: whole batches).
  int rank = -1;
  int world_size = 0;
};

// The ConfigureTraining request `train` sends for its optimizer options.
absl::StatusOr<v1::ConfigureTrainingRequest> TrainingConfigFor(const TrainArgs& args,
                                                               const std::string& output) {
  v1::ConfigureTrainingRequest request;
  request.set_model(args.model);
  v1::TrainingConfig* config = request.mutable_config();
  config->set_loss(v1::LOSS_SOFTMAX_CROSS_ENTROPY);
  config->set_output(output);
  v1::OptimizerConfig* optimizer = config->mutable_optimizer();
  if (args.optimizer == "sgd") {
    optimizer->set_kind(v1::OPTIMIZER_SGD);
  } else if (args.optimizer == "adam") {
    optimizer->set_kind(v1::OPTIMIZER_ADAM);
  } else if (args.optimizer == "rmsprop") {
    optimizer->set_kind(v1::OPTIMIZER_RMSPROP);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer: expected sgd, adam or rmsprop, received '", args.optimizer, "'"));
  }
  if (args.learning_rate) optimizer->set_learning_rate(*args.learning_rate);
  if (args.momentum) optimizer->set_momentum(*args.momentum);
  if (args.weight_decay) optimizer->set_weight_decay(*args.weight_decay);
  optimizer->set_nesterov(args.nesterov);
  if (!args.ps_device.empty()) {
    config->set_reduction(v1::GRADIENT_REDUCTION_PS);
    config->set_ps_device(args.ps_device);
  }
  config->set_checkpoint_every_steps(args.checkpoint_every_steps);
  config->set_checkpoint_dir(args.checkpoint_dir);
  config->set_precision(args.precision);
  return request;
}

// What `replicactl train --help` says about the order of the samples; the
// authoritative statement is client/epoch_order.h.
constexpr char kTrainFooter[] = R"(Data: DIR holds the IDX files of the "train" and "t10k" splits
(train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...), e.g.
/usr/share/datasets/fashion-mnist. Pixels are scaled to [0, 1] (byte / 255) and sent
as float32 [B, 1, rows, cols] (or the model input's own fixed shape); targets are
the int64 labels [B]. The last batch of an epoch may be smaller than B.

Order: epoch e (counted from 0; printed as e+1) visits the first N training samples
(N = --limit or all) in this order, the same on every platform:
  g = std::mt19937_64(seed + e)       (standard seeding; the sum wraps mod 2^64)
  order = [0, 1, ..., N-1]
  for i = N-1 down to 1: j = g() % (i + 1); swap(order[i], order[j])
and batch k holds order[k*B .. k*B+B-1]. The test split is evaluated in file order.)";

// The shape of one sample as the model's first input takes it: its own
// non-batch dims when they are all fixed (e.g. [784] for a flat input), else
// [1, rows, cols], the layout of the images.
absl::StatusOr<std::vector<int64_t>> SampleShape(const std::string& model,
                                                 const v1::TensorSpec& input,
                                                 const ImageDataset& data) {
  if (input.dtype() != v1::DATA_TYPE_FLOAT32 && input.dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    return absl::FailedPreconditionError(absl::StrCat("model '", model, "' input '", input.name(),
                                                      "': expected float32 (images), got ",
                                                      DTypeName(input.dtype())));
  }
  std::vector<int64_t> shape = {1, data.rows, data.cols};
  if (input.shape_size() < 2) return shape;
  int64_t values = 1;
  for (int i = 1; i < input.shape_size(); ++i) {
    if (input.shape(i) < 0) return shape;
    values *= input.shape(i);
  }
  if (values != data.rows * data.cols) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model, "' input '", input.name(), "' ", ShapeText(input.shape()),
                     ": expected ", data.rows * data.cols, " values per sample (", data.rows, "x",
                     data.cols, " images), got ", values));
  }
  return std::vector<int64_t>(input.shape().begin() + 1, input.shape().end());
}

// Samples `indices` of `data` as a float32 batch [B, sample_shape...] named `name`.
v1::Tensor ImageBatch(const ImageDataset& data, const std::vector<int64_t>& indices,
                      const std::string& name, const std::vector<int64_t>& sample_shape) {
  v1::Tensor tensor;
  tensor.set_name(name);
  tensor.set_dtype(v1::DATA_TYPE_FLOAT32);
  tensor.add_shape(static_cast<int64_t>(indices.size()));
  for (int64_t dim : sample_shape) tensor.add_shape(dim);
  const size_t pixels = static_cast<size_t>(data.rows * data.cols);
  std::string* raw = tensor.mutable_raw();
  raw->resize(indices.size() * pixels * sizeof(float));
  // The wire format is little-endian, as is every host replicactl is built for.
  char* out = raw->data();
  for (int64_t index : indices) {
    std::memcpy(out, data.images.data() + static_cast<size_t>(index) * pixels,
                pixels * sizeof(float));
    out += pixels * sizeof(float);
  }
  return tensor;
}

v1::Tensor LabelBatch(const ImageDataset& data, const std::vector<int64_t>& indices) {
  v1::Tensor tensor;
  tensor.set_name("targets");
  tensor.set_dtype(v1::DATA_TYPE_INT64);
  tensor.add_shape(static_cast<int64_t>(indices.size()));
  std::string* raw = tensor.mutable_raw();
  raw->resize(indices.size() * sizeof(int64_t));
  char* out = raw->data();
  for (int64_t index : indices) {
    std::memcpy(out, &data.labels[static_cast<size_t>(index)], sizeof(int64_t));
    out += sizeof(int64_t);
  }
  return tensor;
}

// How many of the `rows` rows of a float32 [rows, classes...] output have their
// largest value at the label of that row (the first maximum wins ties).
absl::StatusOr<int64_t> CountCorrect(const v1::Tensor& output, const std::vector<int64_t>& labels) {
  const int64_t rows = static_cast<int64_t>(labels.size());
  const size_t values = output.raw().size() / sizeof(float);
  if (output.dtype() != v1::DATA_TYPE_FLOAT32 || output.shape_size() < 2 ||
      output.shape(0) != rows || values == 0 || values % static_cast<size_t>(rows) != 0 ||
      output.raw().size() % sizeof(float) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("output '", output.name(), "': expected float32 [", rows,
                     ", classes] scores to take the argmax of, got ", DTypeName(output.dtype()),
                     " ", ShapeText(output.shape()), " with ", output.raw().size(), " bytes"));
  }
  const size_t classes = values / static_cast<size_t>(rows);
  std::vector<float> scores(values);
  std::memcpy(scores.data(), output.raw().data(), values * sizeof(float));
  int64_t correct = 0;
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const float* row = scores.data() + r * classes;
    const int64_t best = std::max_element(row, row + classes) - row;
    if (best == labels[r]) ++correct;
  }
  return correct;
}

// Test accuracy over all of `data`, in file order, `batch_size` samples a call.
absl::StatusOr<double> Evaluate(ReplicadClient& client, const std::string& model,
                                const std::string& input, const std::vector<int64_t>& sample_shape,
                                const std::string& output, const ImageDataset& data,
                                int64_t batch_size) {
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data.count; begin += batch_size) {
    const int64_t end = std::min(data.count, begin + batch_size);
    std::vector<int64_t> indices;
    std::vector<int64_t> labels;
    for (int64_t i = begin; i < end; ++i) {
      indices.push_back(i);
      labels.push_back(data.labels[static_cast<size_t>(i)]);
    }
    v1::PredictRequest request;
    request.set_model(model);
    *request.add_inputs() = ImageBatch(data, indices, input, sample_shape);
    request.add_output_names(output);
    absl::StatusOr<v1::PredictResponse> response = client.Predict(request);
    if (!response.ok()) return InCall("Predict", response.status());
    const v1::Tensor* scores = nullptr;
    for (const v1::Tensor& t : response->outputs()) {
      if (t.name() == output) scores = &t;
    }
    if (scores == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("Predict of model '", model, "' returned no output '", output, "'"));
    }
    absl::StatusOr<int64_t> batch_correct = CountCorrect(*scores, labels);
    if (!batch_correct.ok()) return batch_correct.status();
    correct += *batch_correct;
  }
  return data.count > 0 ? static_cast<double>(correct) / static_cast<double>(data.count) : 0.0;
}

absl::Status CheckTrainArgs(const TrainArgs& args) {
  if (args.epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--epochs ", args.epochs, ": expected >= 1"));
  }
  if (args.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch-size ", args.batch_size, ": expected >= 1"));
  }
  if (args.limit.has_value() && *args.limit < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--limit ", *args.limit, ": expected >= 1"));
  }
  return absl::OkStatus();
}

// Both splits, cut to --limit. Read before contacting the server, so that a
// wrong directory costs nothing there.
absl::StatusOr<std::pair<ImageDataset, ImageDataset>> LoadSplits(const TrainArgs& args) {
  std::error_code error;
  if (!std::filesystem::is_directory(args.data, error)) {
    return absl::NotFoundError(absl::StrCat("--data ", args.data, ": no such directory"));
  }
  std::pair<ImageDataset, ImageDataset> splits;
  const std::pair<const char*, ImageDataset*> wanted[] = {{"train", &splits.first},
                                                          {"t10k", &splits.second}};
  for (const auto& [split, data] : wanted) {
    absl::StatusOr<ImageDataset> loaded = LoadIdxDataset(args.data, split);
    if (!loaded.ok()) return loaded.status();
    *data = std::move(*loaded);
    if (args.limit.has_value() && *args.limit < data->count) {
      data->count = *args.limit;
      data->images.resize(static_cast<size_t>(data->count * data->rows * data->cols));
      data->labels.resize(static_cast<size_t>(data->count));
    }
  }
  if (splits.first.count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(args.data, ": the train split is empty"));
  }
  if (splits.first.rows != splits.second.rows || splits.first.cols != splits.second.cols) {
    return absl::InvalidArgumentError(absl::StrCat(args.data, ": train images are ",
                                                   splits.first.rows, "x", splits.first.cols,
                                                   " but t10k images are ", splits.second.rows, "x",
                                                   splits.second.cols, ": expected one size"));
  }
  return splits;
}

// SaveCheckpoint of `model` to `path` (a path on the server; empty: its
// configured checkpoint_dir).
int RunSaveCheckpoint(ReplicadClient& client, const std::string& model, const std::string& path) {
  v1::SaveCheckpointRequest request;
  request.set_model(model);
  request.set_path(path);
  absl::StatusOr<v1::SaveCheckpointResponse> response = client.SaveCheckpoint(request);
  if (!response.ok()) return Fail(InCall("SaveCheckpoint", response.status()), kExitFailure);
  std::cout << "checkpoint: " << response->path() << " (step " << response->step() << ")\n";
  return 0;
}

int RunTrain(ReplicadClient& client, const TrainArgs& args) {
  if (absl::Status s = CheckTrainArgs(args); !s.ok()) return Fail(s, kExitUsage);
  absl::StatusOr<std::pair<ImageDataset, ImageDataset>> splits = LoadSplits(args);
  if (!splits.ok()) return Fail(splits.status(), kExitFailure);
  const ImageDataset& train = splits->first;
  const ImageDataset& test = splits->second;

  absl::StatusOr<v1::ModelInfo> model = client.GetModel(args.model);
  if (!model.ok()) return Fail(InCall("GetModel", model.status()), kExitFailure);
  if (model->inputs_size() == 0 || model->outputs_size() == 0) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
                    "model '", args.model, "' has ", model->inputs_size(), " inputs and ",
                    model->outputs_size(), " outputs: expected at least one of each")),
                kExitFailure);
  }
  const v1::TensorSpec& input = model->inputs(0);
  std::string output = args.output.empty() ? model->outputs(0).name() : args.output;
  std::vector<std::string> output_names;
  for (const v1::TensorSpec& spec : model->outputs()) output_names.push_back(spec.name());
  if (std::find(output_names.begin(), output_names.end(), output) == output_names.end()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--output ", output, ": model '",
                                                        args.model, "' has outputs ",
                                                        absl::StrJoin(output_names, ", "))),
                kExitUsage);
  }
  if (model->max_batch_size() > 0 && args.batch_size > model->max_batch_size()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--batch-size ", args.batch_size,
                                                        ": model '", args.model, "' takes at most ",
                                                        model->max_batch_size())),
                kExitUsage);
  }
  const bool sharded = args.rank >= 0;
  if (sharded != (args.world_size > 0) ||
      (sharded && (args.rank >= args.world_size || args.optimizer.empty()))) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "--rank and --world-size go together, with 0 <= rank < world size and "
                    "--optimizer (every rank is configured alike); received --rank ",
                    args.rank, " --world-size ", args.world_size,
                    args.optimizer.empty() ? " and no --optimizer" : "")),
                kExitUsage);
  }
  if (!args.precision.empty() && args.optimizer.empty()) {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("--precision ", args.precision,
                                 " is sent with the training configuration: give --optimizer too")),
                kExitUsage);
  }
  int64_t next_step = 0;  // The job's step the next shard belongs to.
  if (!args.optimizer.empty()) {
    absl::StatusOr<v1::ConfigureTrainingRequest> configure = TrainingConfigFor(args, output);
    if (!configure.ok()) return Fail(configure.status(), kExitUsage);
    absl::StatusOr<v1::ConfigureTrainingResponse> configured = client.ConfigureTraining(*configure);
    if (!configured.ok())
      return Fail(InCall("ConfigureTraining", configured.status()), kExitFailure);
    std::cout << "optimizer: " << configured->config().optimizer().ShortDebugString()
              << ", precision " << configured->config().precision() << "\n";
    next_step = configured->step() + 1;
  }
  absl::StatusOr<std::vector<int64_t>> sample_shape = SampleShape(args.model, input, train);
  if (!sample_shape.ok()) return Fail(sample_shape.status(), kExitFailure);

  std::vector<int64_t> batch_shape = {-1};
  batch_shape.insert(batch_shape.end(), sample_shape->begin(), sample_shape->end());
  std::cout << "training '" << args.model << "' on " << train.count << " samples (input '"
            << input.name() << "' " << ShapeText(batch_shape) << "), testing on " << test.count
            << " (output '" << output << "'), batch size " << args.batch_size << ", seed "
            << args.seed << "\n"
            << std::flush;

  ProgressLine progress(std::cerr, isatty(STDERR_FILENO) == 1);
  for (int64_t epoch = 0; epoch < args.epochs; ++epoch) {
    const std::vector<int64_t> order = EpochOrder(train.count, args.seed, epoch);
    EpochProgress state;
    state.epoch = epoch + 1;
    state.epochs = args.epochs;
    state.total = train.count;
    double loss_sum = 0;
    double accuracy_sum = 0;
    int64_t loss_samples = 0;
    int64_t accuracy_samples = 0;
    int64_t skipped_steps = 0;
    const absl::Time start = absl::Now();
    // One TrainSteps stream per epoch: the next batch is written before the
    // answer to the one before is read, so the server always holds it (and
    // uploads it to its GPUs while a step runs). Its deadline is --timeout
    // per step of the epoch.
    const int64_t epoch_steps = (train.count + args.batch_size - 1) / args.batch_size;
    std::unique_ptr<client::ReplicadClient::StepStream> stream = client.TrainSteps(epoch_steps);
    std::deque<int64_t> unanswered;  // Rows of each step written and not yet answered.
    auto answered = [&](const v1::TrainStepResponse& response) {
      const int64_t rows = unanswered.front();
      unanswered.pop_front();
      // The server's count is the truth; an older one may leave it out.
      const int64_t samples = response.samples() > 0 ? response.samples() : rows;
      if (!response.skipped().empty()) {
        ++skipped_steps;  // Its loss is not finite (an fp16 overflow): not in the figures.
      } else {
        loss_sum += response.loss() * static_cast<double>(samples);
        loss_samples += samples;
        if (response.has_accuracy()) {
          accuracy_sum += response.accuracy() * static_cast<double>(samples);
          accuracy_samples += samples;
        }
      }
      state.done += rows;
      state.seconds = absl::ToDoubleSeconds(absl::Now() - start);
      if (loss_samples > 0) state.mean_loss = loss_sum / static_cast<double>(loss_samples);
      if (accuracy_samples > 0) {
        state.accuracy = accuracy_sum / static_cast<double>(accuracy_samples);
      }
      progress.Update(state);
    };
    v1::TrainStepResponse response;
    bool open = true;  // The stream takes steps (none has failed).
    for (int64_t begin = 0; open && begin < train.count; begin += args.batch_size) {
      std::vector<int64_t> indices(order.begin() + begin,
                                   order.begin() + std::min(train.count, begin + args.batch_size));
      const int64_t rows = static_cast<int64_t>(indices.size());
      v1::TrainStepRequest request;
      request.set_model(args.model);
      if (sharded) {
        // This rank's part of the batch: equal parts in rank order, the first
        // `rows % world_size` one row longer (as the server splits over
        // equal slots). Every rank skips a batch with fewer rows than ranks.
        if (rows < args.world_size) continue;
        const int64_t part = rows / args.world_size, longer = rows % args.world_size;
        const int64_t first = args.rank * part + std::min<int64_t>(args.rank, longer);
        const int64_t count = part + (args.rank < longer ? 1 : 0);
        indices = std::vector<int64_t>(indices.begin() + first, indices.begin() + first + count);
        v1::TrainShard* shard = request.mutable_shard();
        shard->set_step(next_step++);
        shard->set_rank(args.rank);
        shard->set_world_size(args.world_size);
      }
      *request.add_inputs() = ImageBatch(train, indices, input.name(), *sample_shape);
      *request.mutable_targets() = LabelBatch(train, indices);
      open = stream->Write(request);
      if (open) unanswered.push_back(rows);
      if (open && unanswered.size() > 1) {
        open = stream->Read(&response);
        if (open) answered(response);
      }
    }
    stream->Close();
    while (!unanswered.empty() && stream->Read(&response)) answered(response);
    if (absl::Status status = stream->Finish(); !status.ok() || !unanswered.empty()) {
      progress.Clear();
      if (status.ok()) status = absl::InternalError("TrainSteps ended with steps unanswered");
      return Fail(InCall("TrainSteps", status), kExitFailure);
    }
    progress.Clear();
    const double rate = state.seconds > 0 ? static_cast<double>(state.done) / state.seconds : 0;

    absl::StatusOr<double> test_accuracy =
        Evaluate(client, args.model, input.name(), *sample_shape, output, test, args.batch_size);
    if (!test_accuracy.ok()) return Fail(test_accuracy.status(), kExitFailure);
    std::cout << absl::StrFormat(
                     "epoch %d: train loss %.4f, train accuracy %s, test accuracy %.4f, "
                     "%.0f samples/s%s\n",
                     epoch + 1, state.mean_loss,
                     state.accuracy.has_value() ? absl::StrFormat("%.4f", *state.accuracy)
                                                : std::string("n/a"),
                     *test_accuracy, rate,
                     skipped_steps > 0
                         ? absl::StrFormat(", %d steps skipped (overflow)", skipped_steps)
                         : std::string())
              << std::flush;
  }

  return args.checkpoint.empty() ? 0 : RunSaveCheckpoint(client, args.model, args.checkpoint);
}

int Main(int argc, char** argv) {
  CLI::App app("Command-line client of a replicad server.", "replicactl");
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();

  std::string server = "localhost:8500";
  double timeout_seconds = 30;
  app.add_option("--server", server, "Server address, HOST:PORT")->capture_default_str();
  app.add_option("--timeout", timeout_seconds, "Deadline of each call in seconds; 0 for none")
      ->capture_default_str();
  ClientOptions options;
  app.add_option("--tls-ca", options.tls_ca_file,
                 "PEM CA certificate that signed the server's: connect with TLS");
  app.add_option("--tls-cert", options.tls_cert_file, "PEM client certificate (mutual TLS)");
  app.add_option("--tls-key", options.tls_key_file, "PEM key of --tls-cert");
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "File holding the bearer token to send (default: $REPLICAD_TOKEN, if set)");

  CLI::App* devices = app.add_subcommand("devices", "List the server's devices");
  CLI::App* models = app.add_subcommand("models", "List the loaded models");
  CLI::App* model = app.add_subcommand("model", "Show one model's signature and replicas");
  std::string model_name;
  model->add_option("name", model_name, "Model name")->required();

  CLI::App* predict = app.add_subcommand("predict", "Run a batch and save the outputs as .npy");
  PredictArgs predict_args;
  predict->add_option("--model", predict_args.model, "Model name")->required();
  predict->add_option("--input", predict_args.inputs, "NAME=FILE.npy, once per input")->required();
  predict->add_option("--output-dir", predict_args.output_dir, "Directory for OUTPUT.npy files")
      ->required();
  predict->add_option("--output", predict_args.outputs, "Output to return; all when omitted");

  CLI::App* save = app.add_subcommand(
      "save-checkpoint", "Write a trained model (ONNX) and its optimizer state on the server");
  std::string save_model, save_path;
  save->add_option("--model", save_model, "Model name")->required();
  save->add_option(
      "--path", save_path,
      "ONNX file to write, on the server (default: a numbered one in its checkpoint_dir)");

  CLI::App* train = app.add_subcommand(
      "train", "Train a model on MNIST-style IDX data, testing after every epoch");
  TrainArgs train_args;
  train->add_option("--model", train_args.model, "Model name")->required();
  train->add_option("--data", train_args.data, "Directory of the IDX files (see below)")
      ->required();
  train->add_option("--epochs", train_args.epochs, "Passes over the training split")->required();
  train->add_option("--batch-size", train_args.batch_size, "Samples per TrainStep and Predict")
      ->required();
  train->add_option("--seed", train_args.seed, "Seed of the sample order (see below)")
      ->capture_default_str();
  int64_t limit = 0;
  CLI::Option* limit_option = train->add_option(
      "--limit", limit, "Use only the first N samples of each split (quick runs)");
  train->add_option("--checkpoint", train_args.checkpoint,
                    "After training, save the model to this ONNX file (a path on the server)");
  train->add_option("--output", train_args.output,
                    "Output whose argmax is the predicted class; default: the model's first");
  train->add_option("--optimizer", train_args.optimizer,
                    "sgd, adam or rmsprop: configure training (softmax cross-entropy on --output) "
                    "before the first step; without it the server's configuration trains");
  train->add_option("--lr", train_args.learning_rate, "Learning rate (with --optimizer)");
  train->add_option("--momentum", train_args.momentum, "SGD/RMSprop momentum (with --optimizer)");
  train->add_option("--weight-decay", train_args.weight_decay,
                    "L2 weight decay (with --optimizer)");
  train->add_flag("--nesterov", train_args.nesterov, "Nesterov momentum (SGD, with --optimizer)");
  train->add_option("--ps-device", train_args.ps_device,
                    "Reduce through a parameter server on this device, e.g. cpu:0 (with "
                    "--optimizer; default: allreduce among the slots)");
  train
      ->add_option("--checkpoint-every-steps", train_args.checkpoint_every_steps,
                   "Write a numbered checkpoint every N steps into --checkpoint-dir on the "
                   "server (with --optimizer; a restart on the newest resumes there)")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--checkpoint-dir", train_args.checkpoint_dir,
                    "Directory under the server's --checkpoint-root for the periodic checkpoints "
                    "(with --checkpoint-every-steps)");
  train->add_option("--precision", train_args.precision,
                    "What the forward pass's convolutions and weight products compute in: fp32, "
                    "bf16 (bfloat16 inputs and weights, float32 sums, gradients and master "
                    "weights) or fp16 (float16 products forward and backward, with dynamic loss "
                    "scaling; overflowing steps are skipped) or tf32 (TF32 tensor cores on CUDA "
                    "slots); with --optimizer");
  train->add_option("--rank", train_args.rank,
                    "With --world-size: feed rank R of a job started with --rank-shards its part "
                    "of every batch (every rank's client runs the same command but for --rank "
                    "and --server)");
  train->add_option("--world-size", train_args.world_size, "The job's ranks (with --rank)");
  train->footer(kTrainFooter);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << "replicactl: " << absl::StatusCodeToString(absl::StatusCode::kInvalidArgument)
              << ": " << e.what() << "\nRun 'replicactl --help' for usage.\n";
    return kExitUsage;
  }

  if (!(timeout_seconds >= 0)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--timeout ", timeout_seconds,
                                                        ": expected seconds >= 0 (0 for none)")),
                kExitUsage);
  }
  options.deadline =
      timeout_seconds == 0 ? absl::InfiniteDuration() : absl::Seconds(timeout_seconds);
  // A token on the command line would show in every process listing.
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in || !std::getline(in, options.token) || options.token.empty()) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("--token-file ", token_file, ": cannot read a token from it")),
                  kExitUsage);
    }
  } else if (const char* token = std::getenv("REPLICAD_TOKEN"); token != nullptr) {
    options.token = token;
  }
  absl::StatusOr<std::unique_ptr<ReplicadClient>> client = ReplicadClient::Connect(server, options);
  if (!client.ok()) return Fail(client.status(), kExitUsage);

  if (*devices) return RunDevices(**client);
  if (*models) return RunModels(**client);
  if (*model) return RunModel(**client, model_name);
  if (*save) return RunSaveCheckpoint(**client, save_model, save_path);
  if (*train) {
    if (limit_option->count() > 0) train_args.limit = limit;
    return RunTrain(**client, train_args);
  }
  return RunPredict(**client, predict_args);
}

}  // namespace
}  // namespace replicad::client

int main(int argc, char** argv) { return replicad::client::Main(argc, argv); }
