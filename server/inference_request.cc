#include "server/inference_request.h"

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/client_text.h"
#include "core/base/status_macros.h"
#include "core/tensor/dtype.h"
#include "server/inference_protocol.h"

namespace replicad {
namespace {

using Parameters = google::protobuf::Map<std::string, inference::InferParameter>;

constexpr char kRegion[] = "shared_memory_region";
constexpr char kOffset[] = "shared_memory_offset";
constexpr char kByteSize[] = "shared_memory_byte_size";

// Parameters whose meaning the answer would silently ignore are refused.
absl::Status CheckUnsupportedParameters(const Parameters& parameters, const std::string& field) {
  if (parameters.count("classification")) {
    return absl::UnimplementedError(absl::StrCat(
        field, ".parameters.classification: not supported by replicad yet (see docs/status.md)"));
  }
  return absl::OkStatus();
}

// Triton's request parameters for the core: "priority" and "timeout"
// (microseconds in the queue, as the model's queue policy allows).
absl::Status ApplyRequestParameters(const Parameters& parameters, RequestContext* context) {
  if (auto it = parameters.find("priority"); it != parameters.end()) {
    REPLICAD_ASSIGN_OR_RETURN(uint64_t priority,
                              UnsignedParameter(it->second, "parameters.priority"));
    context->priority = priority;
  }
  if (auto it = parameters.find("timeout"); it != parameters.end()) {
    REPLICAD_ASSIGN_OR_RETURN(uint64_t timeout,
                              UnsignedParameter(it->second, "parameters.timeout"));
    if (timeout > 0) {
      const int64_t us = static_cast<int64_t>(std::min<uint64_t>(timeout, INT64_MAX));
      context->timeout = absl::Microseconds(us);
    }
  }
  return CheckUnsupportedParameters(parameters, "request");
}

// The shared-memory placement a tensor's parameters ask for, if any.
absl::StatusOr<std::optional<TensorRegion>> RegionOf(const Parameters& parameters,
                                                     const std::string& tensor,
                                                     const SharedMemoryRegistry* registry) {
  auto region = parameters.find(kRegion);
  if (region == parameters.end()) {
    for (const char* name : {kOffset, kByteSize}) {
      if (parameters.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(tensor, ".parameters.", name, ": given without ", kRegion));
      }
    }
    return std::nullopt;
  }
  if (registry == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(tensor, ".parameters.", kRegion,
                     ": system shared memory is disabled on this server (--system-shared-memory)"));
  }
  if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return absl::InvalidArgumentError(absl::StrCat(tensor, ".parameters.", kRegion,
                                                   ": expected a string, received ",
                                                   ParameterText(region->second)));
  }
  TensorRegion out;
  out.region = region->second.string_param();
  auto byte_size = parameters.find(kByteSize);
  if (byte_size == parameters.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensor, ".parameters.", kByteSize, ": required with ", kRegion));
  }
  REPLICAD_ASSIGN_OR_RETURN(
      uint64_t size,
      UnsignedParameter(byte_size->second, absl::StrCat(tensor, ".parameters.", kByteSize)));
  out.byte_size = size;
  if (auto offset = parameters.find(kOffset); offset != parameters.end()) {
    absl::StatusOr<uint64_t> value =
        UnsignedParameter(offset->second, absl::StrCat(tensor, ".parameters.", kOffset));
    if (!value.ok()) return value.status();
    out.offset = *value;
  }
  absl::StatusOr<SharedMemoryView> view =
      registry->Find(out.region, out.offset, out.byte_size, tensor);
  if (!view.ok()) return view.status();
  out.view = *std::move(view);
  return out;
}

// Whether a tensor of `dtype` may be used where `view` lies in the mapping:
// its region is intact and the pointer aligned for the dtype (a client's
// offsets are arbitrary, and a misaligned float* is undefined behaviour).
bool UsableInPlace(const SharedMemoryView& view, DType dtype) {
  const size_t alignment = std::max<size_t>(1, DTypeSize(dtype));
  return view.data() != nullptr && reinterpret_cast<uintptr_t>(view.data()) % alignment == 0 &&
         view.CheckIntact().ok();
}

}  // namespace

absl::StatusOr<uint64_t> UnsignedParameter(const inference::InferParameter& parameter,
                                           const std::string& field) {
  switch (parameter.parameter_choice_case()) {
    case inference::InferParameter::kInt64Param:
      if (parameter.int64_param() >= 0) return static_cast<uint64_t>(parameter.int64_param());
      break;
    case inference::InferParameter::kUint64Param:
      return parameter.uint64_param();
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": expected a non-negative integer, received ", ParameterText(parameter)));
}

std::string ParameterText(const inference::InferParameter& parameter) {
  switch (parameter.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return parameter.bool_param() ? "true" : "false";
    case inference::InferParameter::kInt64Param:
      return absl::StrCat(parameter.int64_param());
    case inference::InferParameter::kUint64Param:
      return absl::StrCat(parameter.uint64_param());
    case inference::InferParameter::kDoubleParam:
      return absl::StrCat(parameter.double_param(), " (a fraction)");
    case inference::InferParameter::kStringParam:
      return absl::StrCat("\"", parameter.string_param(), "\" (a string)");
    default:
      return "nothing";
  }
}

absl::StatusOr<DecodedInfer> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                absl::Span<const WireBytes> input_bytes,
                                                const SharedMemoryRegistry* shared_memory,
                                                RequestContext* context) {
  REPLICAD_RETURN_IF_ERROR(ApplyRequestParameters(request.parameters(), context));
  DecodedInfer decoded;
  InferRequest& infer = decoded.request;
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "the protocol's tensor bytes are little-endian and are used in place");
  infer.model = request.model_name();
  infer.model_field = "model_name";
  infer.outputs_field = "outputs";
  REPLICAD_ASSIGN_OR_RETURN(int64_t version,
                            ParseModelVersion(request.model_version(), "model_version"));
  infer.version = version;
  if (input_bytes.size() != static_cast<size_t>(request.inputs_size())) {
    return absl::InternalError("a protocol door decoded the wrong number of inputs");
  }
  // Inputs in shared memory: their index in infer.inputs, and their bytes.
  std::vector<std::pair<size_t, SharedMemoryView>> shared_inputs;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const inference::ModelInferRequest::InferInputTensor& t = request.inputs(i);
    const std::string tensor = absl::StrCat("inputs[", i, "] '", ClientText(t.name()), "'");
    absl::StatusOr<DType> dtype = DTypeFromDatatype(t.datatype(), tensor + ".datatype");
    if (!dtype.ok()) return dtype.status();
    REPLICAD_RETURN_IF_ERROR(CheckUnsupportedParameters(t.parameters(), tensor));
    absl::StatusOr<std::optional<TensorRegion>> region =
        RegionOf(t.parameters(), tensor, shared_memory);
    if (!region.ok()) return region.status();
    RequestInput input{t.name(), *dtype, Shape(t.shape().begin(), t.shape().end()), nullptr, 0};
    if (region->has_value()) {
      if (input_bytes[i].present) {
        return absl::InvalidArgumentError(absl::StrCat(
            tensor, ": data is given both in the request and in shared memory region '",
            (*region)->region, "'; send one of them"));
      }
      // Placed once the outputs' regions are known (see below).
      shared_inputs.emplace_back(infer.inputs.size(), (*region)->view);
    } else {
      if (!input_bytes[i].present) {
        return absl::InvalidArgumentError(
            absl::StrCat(tensor, ": no data; expected its contents or a shared memory region"));
      }
      input.data = input_bytes[i].data;
      input.bytes = input_bytes[i].bytes;
    }
    infer.inputs.push_back(std::move(input));
  }
  absl::flat_hash_map<std::string, int> requested;  // Output name -> its index.
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& output = request.outputs(i);
    const std::string tensor = absl::StrCat("outputs[", i, "] '", ClientText(output.name()), "'");
    REPLICAD_RETURN_IF_ERROR(CheckUnsupportedParameters(output.parameters(), tensor));
    absl::StatusOr<std::optional<TensorRegion>> region =
        RegionOf(output.parameters(), tensor, shared_memory);
    if (!region.ok()) return region.status();
    if (auto [it, added] = requested.emplace(output.name(), i); !added) {
      return absl::InvalidArgumentError(
          absl::StrCat(tensor, ": already requested as outputs[", it->second, "]"));
    }
    if (region->has_value()) decoded.output_regions[output.name()] = **std::move(region);
    infer.outputs.push_back(output.name());
  }
  // An input is read in place unless an output may write over it during the
  // run (same object, overlapping bytes): then, as for a misaligned or
  // broken region, it is copied first.
  for (const auto& [index, view] : shared_inputs) {
    RequestInput& input = infer.inputs[index];
    const bool overlaps_output = std::any_of(
        decoded.output_regions.begin(), decoded.output_regions.end(),
        [&view = view](const auto& output) { return output.second.view.Overlaps(view); });
    if (!overlaps_output && UsableInPlace(view, input.dtype)) {
      input.data = view.data();
      input.bytes = view.bytes();
      decoded.inputs.in_place.push_back(view);
      continue;
    }
    std::vector<char>& copy = decoded.inputs.copies.emplace_back(view.bytes());
    REPLICAD_RETURN_IF_ERROR(view.Read(copy.data()));
    input.data = copy.data();
    input.bytes = copy.size();
  }
  return decoded;
}

absl::StatusOr<void*> InferOutputs::AddOutput(const TensorSpec& spec, const TensorType& type) {
  auto it = regions_.find(spec.name);
  if (it == regions_.end()) return Place(spec, type, nullptr);
  const TensorRegion& region = it->second;
  const size_t needed = ByteSize(type);
  if (region.view.bytes() < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output '", spec.name, "': shared memory region '", region.region, "' gives ",
        region.view.bytes(), " bytes (shared_memory_byte_size), the output needs ", needed));
  }
  absl::StatusOr<void*> placed = Place(spec, type, &region);
  if (!placed.ok()) return placed.status();
  if (UsableInPlace(region.view, type.dtype)) {
    in_place_.push_back(&region);
    return static_cast<void*>(region.view.data());
  }
  std::vector<char>& bytes = to_regions_.emplace_back(&region, std::vector<char>(needed)).second;
  return static_cast<void*>(bytes.data());
}

absl::Status InferOutputs::FinishRegions() const {
  for (const SharedMemoryView& view : inputs_.in_place) {
    REPLICAD_RETURN_IF_ERROR(view.CheckIntact());
  }
  for (const TensorRegion* region : in_place_) {
    REPLICAD_RETURN_IF_ERROR(region->view.CheckIntact());
  }
  for (const auto& [region, bytes] : to_regions_) {
    REPLICAD_RETURN_IF_ERROR(region->view.Write(bytes.data(), bytes.size()));
  }
  return absl::OkStatus();
}

}  // namespace replicad
