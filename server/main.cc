// replicad: serves ONNX models over gRPC, splitting every batch across replicas.
#include <cstdio>
#include <fstream>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/backends.h"
#include "core/base/log.h"
#include "core/model/default_model.h"
#include "server/daemon.h"
#include "server/flags.h"
#include "server/memory_trimmer.h"
#include "server/server_options.h"

namespace replicad {
namespace {

int Fail(const absl::Status& status) {
  LogError(absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()));
  return 1;
}

void PrintDevices(const std::vector<DeviceInfo>& devices) {
  for (const DeviceInfo& d : devices) {
    std::printf("%-8s %-48s %8.1f GiB %s\n", DeviceIdToString(d.id).c_str(), d.name.c_str(),
                static_cast<double>(d.memory_bytes) / (1 << 30),
                d.compute_capability.empty()
                    ? ""
                    : absl::StrCat("cc ", d.compute_capability, ", driver ", d.driver_version,
                                   ", runtime ", d.runtime_version)
                          .c_str());
  }
}

int Serve(ServerOptions options) {
  Daemon daemon(std::move(options));
  if (absl::Status started = daemon.Start(); !started.ok()) return Fail(started);
  daemon.Wait();
  return daemon.Drain();
}

}  // namespace
}  // namespace replicad

int main(int argc, char** argv) {
  using replicad::ServerOptions;
  // Debian's Abseil is built with deadlock detection on, which records every
  // Mutex acquisition in one process-wide graph under a global lock; the
  // tests keep it, the daemon has no use for it on its request path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before any thread allocates: large blocks freed go back to the system.
  replicad::MemoryTrimmer::MapAllocationsFrom(replicad::MemoryTrimmer::kDefaultMapBytes);
  CLI::App app{"replicad: serves ONNX models over gRPC, splitting every batch across replicas"};
  app.require_subcommand(1);
  ServerOptions options;
  replicad::AddServeCommand(app, options);
  CLI::App* devices = app.add_subcommand("devices", "List this machine's devices and exit");
  CLI::App* default_model = app.add_subcommand(
      "default-model", "Write the embedded default model (ONNX, initial weights) and exit");
  std::string default_model_path;
  default_model->add_option("--output", default_model_path, "ONNX file to write")->required();
  CLI11_PARSE(app, argc, argv);

  if (default_model->parsed()) {
    std::ofstream out(default_model_path, std::ios::binary);
    out << replicad::DefaultModelOnnxBytes();
    out.close();
    if (!out) {
      return replicad::Fail(
          absl::PermissionDeniedError(absl::StrCat("cannot write '", default_model_path, "'")));
    }
    return 0;
  }

  if (devices->parsed()) {
    absl::StatusOr<std::vector<replicad::DeviceInfo>> found = replicad::EnumerateDevices();
    if (!found.ok()) return replicad::Fail(found.status());
    replicad::PrintDevices(*found);
    return 0;
  }
  return replicad::Serve(options);
}
