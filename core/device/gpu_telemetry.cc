#include "core/device/gpu_telemetry.h"

#include <dlfcn.h>

#include <type_traits>

#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

// NVML's C ABI, declared here so that no NVML header is needed: the few
// entry points replicad calls, with the types they take (stable since NVML
// 5; the _v2 names are what nvml.h maps the plain names to).
using NvmlReturn = int;  // NVML_SUCCESS is 0.
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlTemperatureGpu = 0;

}  // namespace

struct GpuTelemetry::Api {
  void* library = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*device_count)(unsigned int*) = nullptr;
  NvmlReturn (*device_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;

  std::string Error(NvmlReturn code) const {
    return error_string != nullptr ? error_string(code) : absl::StrCat("NVML error ", code);
  }
};

absl::StatusOr<std::unique_ptr<GpuTelemetry>> GpuTelemetry::Load(const std::string& library) {
  auto api = std::make_unique<Api>();
  api->library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("NVML (", library, ") cannot be loaded: ", why != nullptr ? why : "?"));
  }
  bool complete = true;
  auto bind = [&](auto* function, const char* name) {
    *function =
        reinterpret_cast<std::remove_pointer_t<decltype(function)>>(dlsym(api->library, name));
    complete = complete && *function != nullptr;
  };
  bind(&api->init, "nvmlInit_v2");
  bind(&api->shutdown, "nvmlShutdown");
  bind(&api->device_count, "nvmlDeviceGetCount_v2");
  bind(&api->device_by_index, "nvmlDeviceGetHandleByIndex_v2");
  bind(&api->utilization, "nvmlDeviceGetUtilizationRates");
  bind(&api->memory, "nvmlDeviceGetMemoryInfo");
  bind(&api->power, "nvmlDeviceGetPowerUsage");
  bind(&api->temperature, "nvmlDeviceGetTemperature");
  bind(&api->error_string, "nvmlErrorString");
  if (!complete) {
    dlclose(api->library);
    return absl::UnavailableError(
        absl::StrCat("NVML (", library, ") lacks an entry point replicad needs"));
  }
  if (NvmlReturn code = api->init(); code != 0) {
    const std::string why = api->Error(code);
    dlclose(api->library);
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2: ", why));
  }
  return std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(api)));
}

GpuTelemetry::GpuTelemetry(std::unique_ptr<Api> api) : api_(std::move(api)) {}

GpuTelemetry::~GpuTelemetry() {
  api_->shutdown();
  dlclose(api_->library);
}

absl::StatusOr<std::vector<GpuReading>> GpuTelemetry::Read() const {
  unsigned int count = 0;
  if (NvmlReturn code = api_->device_count(&count); code != 0) {
    return absl::InternalError(absl::StrCat("nvmlDeviceGetCount_v2: ", api_->Error(code)));
  }
  std::vector<GpuReading> readings;
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (NvmlReturn code = api_->device_by_index(i, &device); code != 0) {
      return absl::InternalError(
          absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", i, "): ", api_->Error(code)));
    }
    GpuReading reading;
    reading.index = static_cast<int>(i);
    NvmlUtilization utilization{};
    if (api_->utilization(device, &utilization) == 0) reading.utilization = utilization.gpu / 100.0;
    NvmlMemory memory{};
    if (api_->memory(device, &memory) == 0) {
      reading.memory_used_bytes = memory.used;
      reading.memory_total_bytes = memory.total;
    }
    unsigned int milliwatts = 0;
    if (api_->power(device, &milliwatts) == 0) reading.power_watts = milliwatts / 1000.0;
    unsigned int celsius = 0;
    if (api_->temperature(device, kNvmlTemperatureGpu, &celsius) == 0) {
      reading.temperature_celsius = celsius;
    }
    readings.push_back(reading);
  }
  return readings;
}

}  // namespace replicad
