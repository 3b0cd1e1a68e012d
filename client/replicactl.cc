// replicactl: command-line client of a replicad server.
//
//   replicactl [--server HOST:PORT] [--timeout SECONDS] devices
//   replicactl ... models
//   replicactl ... model NAME
//   replicactl ... predict --model M --input NAME=FILE.npy [--input ...]
//                          --output-dir DIR [--output NAME ...]
//
// Errors are one line on stderr, "replicactl: <code name>: <message>". Exit
// codes: 0 success, 1 a failed call or file operation, 2 a malformed command line.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
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
#include "client/npy.h"
#include "client/replicad_client.h"

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
      {"ID", "KIND", "NAME", "MEMORY", "COMPUTE CAPABILITY", "SLOTS"}};
  for (const v1::DeviceInfo& d : response->devices()) {
    rows.push_back({d.id(), d.kind(), DashIfEmpty(d.name()), FormatBytes(d.memory_bytes()),
                    DashIfEmpty(d.compute_capability()), absl::StrCat(d.slots())});
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
  std::vector<std::vector<std::string>> rows = {{"SLOT", "DEVICE", "WEIGHT"}};
  for (const v1::ReplicaInfo& r : model->replicas()) {
    rows.push_back({r.slot(), r.device(), absl::StrFormat("%g", r.weight())});
  }
  PrintTable(rows, "  ");
  std::cout << "merge device: " << DashIfEmpty(model->merge_device()) << "\n"
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
  ClientOptions options;
  options.deadline =
      timeout_seconds == 0 ? absl::InfiniteDuration() : absl::Seconds(timeout_seconds);
  absl::StatusOr<std::unique_ptr<ReplicadClient>> client = ReplicadClient::Connect(server, options);
  if (!client.ok()) return Fail(client.status(), kExitUsage);

  if (*devices) return RunDevices(**client);
  if (*models) return RunModels(**client);
  if (*model) return RunModel(**client, model_name);
  return RunPredict(**client, predict_args);
}

}  // namespace
}  // namespace replicad::client

int main(int argc, char** argv) { return replicad::client::Main(argc, argv); }
