#include "core/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <optional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/onnx_tensor.h"
#include "core/ops/optimizer_step_attributes.h"
#include "onnx/onnx_pb.h"

namespace replicad {
namespace {

constexpr char kStepKey[] = "replicad.step";
constexpr char kIdKey[] = "replicad.checkpoint_id";
constexpr char kFormatKey[] = "replicad.format";
constexpr char kStateFormat[] = "replicad.optimizer_state.v1";
constexpr char kOptimizerPrefix[] = "replicad.optimizer.";
constexpr char kTrainingConfigKey[] = "replicad.training_config";
constexpr char kTempSuffix[] = ".tmp";

// "write /x/m.onnx.tmp: No space left on device", with the errno's status code.
absl::Status SysError(absl::string_view call, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(error, absl::StrCat(call, " ", path));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    // Linux writes at most ~2 GiB per call; smaller chunks keep every call well inside.
    const size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    const ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SysError("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return SysError("open", dir);
  absl::Status status = ::fsync(fd) == 0 ? absl::OkStatus() : SysError("fsync", dir);
  ::close(fd);
  return status;
}

// Replaces `path` with `bytes` so that, whenever the process dies, `path` is the old file or
// the new one. rename() is atomic on POSIX file systems; the fsync before it makes the new
// bytes durable before the name points at them (without it, ext4 and XFS may show an empty
// file after a power loss); the directory fsync makes the rename itself durable.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string temp = path + kTempSuffix;
  // What is at the temporary name (a crashed write's file, or a symbolic
  // link someone planted there) is removed, not written through: the file is
  // then created exclusively, so a link planted again meanwhile fails the
  // open (EEXIST) instead of being followed.
  ::unlink(temp.c_str());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return SysError("open", temp);
  absl::Status status = WriteAll(fd, bytes, temp);
  if (status.ok() && ::fsync(fd) != 0) status = SysError("fsync", temp);
  // close() reports deferred write errors on some file systems (NFS), so it is checked.
  if (::close(fd) != 0 && status.ok()) status = SysError("close", temp);
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = SysError("rename", absl::StrCat(temp, " to ", path));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  return SyncDirectory(DirectoryOf(path));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SysError("open", path);
  std::string bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = SysError("read", path);
      ::close(fd);
      return status;
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

const std::string* FindMetadata(const onnx::ModelProto& model, absl::string_view key) {
  for (const onnx::StringStringEntryProto& entry : model.metadata_props()) {
    if (entry.key() == key) return &entry.value();
  }
  return nullptr;
}

// Replaces an existing entry (the source model may itself be a checkpoint) or adds one.
void SetMetadata(onnx::ModelProto* model, const std::string& key, const std::string& value) {
  for (onnx::StringStringEntryProto& entry : *model->mutable_metadata_props()) {
    if (entry.key() == key) {
      entry.set_value(value);
      return;
    }
  }
  onnx::StringStringEntryProto* entry = model->add_metadata_props();
  entry->set_key(key);
  entry->set_value(value);
}

// Distinguishes two writes of the same step (e.g. a restarted run reaching the step of an
// earlier one), which the step alone cannot.
std::string NewCheckpointId() {
  std::random_device device;
  const uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("%016x", id);
}

absl::Status CheckHostTensor(const Tensor& tensor, absl::string_view what) {
  if (tensor.buffer() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no data"));
  }
  if (tensor.location().kind != MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be in host memory; received ",
                                                   MemoryLocationToString(tensor.location())));
  }
  return absl::OkStatus();
}

std::string OnnxTypeString(const onnx::TensorProto& proto) {
  const Shape shape(proto.dims().begin(), proto.dims().end());
  absl::StatusOr<DType> dtype = DTypeFromOnnx(proto.data_type());
  if (dtype.ok()) return TensorTypeToString(TensorType{*dtype, shape});
  return absl::StrCat(OnnxDataTypeName(proto.data_type()), ShapeToString(shape));
}

absl::StatusOr<std::string> Serialize(const onnx::ModelProto& model, const std::string& path) {
  // Protobuf cannot encode a message of 2 GiB or more (ONNX's external data would be needed).
  const size_t size = model.ByteSizeLong();
  std::string bytes;
  if (size > static_cast<size_t>(INT_MAX) || !model.SerializeToString(&bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot serialize ", size, " bytes; protobuf's limit is 2 GiB - 1"));
  }
  return bytes;
}

onnx::ModelProto StateModel(const Checkpoint& checkpoint, const std::string& id) {
  onnx::ModelProto state;
  state.set_ir_version(onnx::IR_VERSION);
  state.set_producer_name("replicad");
  state.set_doc_string(
      "replicad optimizer state: step, optimizer config and checkpoint id in metadata_props, "
      "state tensors as initializers");
  SetMetadata(&state, kFormatKey, kStateFormat);
  SetMetadata(&state, kStepKey, absl::StrCat(checkpoint.step));
  SetMetadata(&state, kIdKey, id);
  const OptimizerConfig& config = checkpoint.optimizer;
  SetMetadata(&state, absl::StrCat(kOptimizerPrefix, "kind"), OptimizerKindName(config.kind));
  SetMetadata(&state, absl::StrCat(kOptimizerPrefix, "nesterov"),
              config.nesterov ? "true" : "false");
  for (const OptimizerFloatField& field : kOptimizerFloatFields) {
    // %.9g round-trips every float32 exactly.
    SetMetadata(&state, absl::StrCat(kOptimizerPrefix, field.name),
                absl::StrFormat("%.9g", config.*field.member));
  }
  if (!checkpoint.training_config.empty()) {
    SetMetadata(&state, kTrainingConfigKey, checkpoint.training_config);
  }
  onnx::GraphProto* graph = state.mutable_graph();
  graph->set_name("optimizer_state");
  for (const auto& [name, tensor] : checkpoint.optimizer_state) {
    TensorToOnnx(tensor, name, graph->add_initializer());
  }
  return state;
}

absl::Status Invalid(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

absl::StatusOr<const std::string*> RequiredMetadata(const onnx::ModelProto& model,
                                                    const std::string& path,
                                                    const std::string& key) {
  const std::string* value = FindMetadata(model, key);
  if (value == nullptr) return Invalid(path, absl::StrCat("metadata_props lacks '", key, "'"));
  return value;
}

absl::StatusOr<int64_t> ParseStep(const std::string& path, const std::string& value) {
  int64_t step = 0;
  if (!absl::SimpleAtoi(value, &step) || step < 0) {
    return Invalid(path, absl::StrCat("metadata '", kStepKey,
                                      "' must be an integer >= 0; received '", value, "'"));
  }
  return step;
}

absl::StatusOr<OptimizerConfig> ParseConfig(const onnx::ModelProto& state,
                                            const std::string& path) {
  OptimizerConfig config;
  absl::StatusOr<const std::string*> kind =
      RequiredMetadata(state, path, absl::StrCat(kOptimizerPrefix, "kind"));
  if (!kind.ok()) return kind.status();
  const std::optional<OptimizerConfig::Kind> parsed = OptimizerKindFromName(**kind);
  if (!parsed) {
    return Invalid(path,
                   absl::StrCat("metadata '", kOptimizerPrefix,
                                "kind' must be sgd, adam or rmsprop; received '", **kind, "'"));
  }
  config.kind = *parsed;
  absl::StatusOr<const std::string*> nesterov =
      RequiredMetadata(state, path, absl::StrCat(kOptimizerPrefix, "nesterov"));
  if (!nesterov.ok()) return nesterov.status();
  if (**nesterov != "true" && **nesterov != "false") {
    return Invalid(path,
                   absl::StrCat("metadata '", kOptimizerPrefix,
                                "nesterov' must be true or false; received '", **nesterov, "'"));
  }
  config.nesterov = **nesterov == "true";
  for (const OptimizerFloatField& field : kOptimizerFloatFields) {
    const std::string key = absl::StrCat(kOptimizerPrefix, field.name);
    absl::StatusOr<const std::string*> value = RequiredMetadata(state, path, key);
    if (!value.ok()) return value.status();
    if (!absl::SimpleAtof(**value, &(config.*field.member))) {
      return Invalid(
          path, absl::StrCat("metadata '", key, "' must be a number; received '", **value, "'"));
    }
  }
  if (absl::Status status = ValidateOptimizerConfig(config); !status.ok()) {
    return Invalid(path, status.message());
  }
  return config;
}

absl::StatusOr<Tensor> TensorFromFile(const onnx::TensorProto& proto, const std::string& path) {
  absl::StatusOr<Tensor> tensor = TensorFromOnnx(proto);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat(path, ": ", tensor.status().message()));
  }
  return tensor;
}

// Fills `loaded`'s optimizer fields from the state file when it belongs to the ONNX file
// (same step and id); leaves them empty when it is missing or from another write.
absl::Status ReadState(const std::string& path, int64_t step, const std::string& id,
                       LoadedCheckpoint* loaded) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (absl::IsNotFound(bytes.status())) return absl::OkStatus();
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto state;
  if (!state.ParseFromString(*bytes)) return Invalid(path, "not an ONNX model (cannot parse)");
  const std::string* format = FindMetadata(state, kFormatKey);
  if (format == nullptr || *format != kStateFormat) {
    return Invalid(path, absl::StrCat("not a replicad optimizer state file (metadata '", kFormatKey,
                                      "' must be '", kStateFormat, "'; received '",
                                      format == nullptr ? "<none>" : *format, "')"));
  }
  absl::StatusOr<const std::string*> step_text = RequiredMetadata(state, path, kStepKey);
  if (!step_text.ok()) return step_text.status();
  absl::StatusOr<int64_t> state_step = ParseStep(path, **step_text);
  if (!state_step.ok()) return state_step.status();
  absl::StatusOr<const std::string*> state_id = RequiredMetadata(state, path, kIdKey);
  if (!state_id.ok()) return state_id.status();
  if (*state_step != step || **state_id != id) return absl::OkStatus();

  absl::StatusOr<OptimizerConfig> config = ParseConfig(state, path);
  if (!config.ok()) return config.status();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const onnx::TensorProto& proto : state.graph().initializer()) {
    absl::StatusOr<Tensor> tensor = TensorFromFile(proto, path);
    if (!tensor.ok()) return tensor.status();
    tensors.emplace_back(proto.name(), *std::move(tensor));
  }
  loaded->checkpoint.optimizer = *config;
  loaded->checkpoint.optimizer_state = std::move(tensors);
  if (const std::string* training = FindMetadata(state, kTrainingConfigKey)) {
    loaded->checkpoint.training_config = *training;
  }
  loaded->state_matches = true;
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointStatePath(const std::string& onnx_path) { return onnx_path + ".state"; }

absl::Status WriteCheckpoint(const std::string& source_model, const std::string& onnx_path,
                             const Checkpoint& checkpoint) {
  if (checkpoint.step < 0) {
    return Invalid(onnx_path,
                   absl::StrCat("checkpoint.step must be >= 0; received ", checkpoint.step));
  }
  if (absl::Status status = ValidateOptimizerConfig(checkpoint.optimizer); !status.ok()) {
    return Invalid(onnx_path, status.message());
  }
  for (const auto& [name, tensor] : checkpoint.optimizer_state) {
    absl::Status status = CheckHostTensor(tensor, absl::StrCat("optimizer state '", name, "'"));
    if (!status.ok()) return Invalid(onnx_path, status.message());
  }
  onnx::ModelProto model;
  if (!model.ParseFromString(source_model)) {
    return Invalid(onnx_path, "the source model is not an ONNX model (cannot parse)");
  }
  std::map<std::string, onnx::TensorProto*> initializers;
  for (onnx::TensorProto& proto : *model.mutable_graph()->mutable_initializer()) {
    initializers.emplace(proto.name(), &proto);
  }
  for (const auto& [name, tensor] : checkpoint.parameters) {
    auto it = initializers.find(name);
    if (it == initializers.end()) {
      return absl::NotFoundError(absl::StrCat(onnx_path, ": parameter '", name,
                                              "' is not an initializer of the source model"));
    }
    const std::string what = absl::StrCat("parameter '", name, "'");
    if (absl::Status status = CheckHostTensor(tensor, what); !status.ok()) {
      return Invalid(onnx_path, status.message());
    }
    onnx::TensorProto* proto = it->second;
    const Shape dims(proto->dims().begin(), proto->dims().end());
    if (proto->data_type() != static_cast<int>(tensor.dtype()) || dims != tensor.shape()) {
      return Invalid(onnx_path, absl::StrCat(what, " must be ", OnnxTypeString(*proto),
                                             " like its initializer; received ",
                                             TensorTypeToString(tensor.type())));
    }
    std::string doc = proto->doc_string();
    TensorToOnnx(tensor, name, proto);
    if (!doc.empty()) proto->set_doc_string(std::move(doc));
  }
  const std::string id = NewCheckpointId();
  SetMetadata(&model, kStepKey, absl::StrCat(checkpoint.step));
  SetMetadata(&model, kIdKey, id);

  const std::string state_path = CheckpointStatePath(onnx_path);
  absl::StatusOr<std::string> onnx_bytes = Serialize(model, onnx_path);
  if (!onnx_bytes.ok()) return onnx_bytes.status();
  absl::StatusOr<std::string> state_bytes = Serialize(StateModel(checkpoint, id), state_path);
  if (!state_bytes.ok()) return state_bytes.status();
  // Only a regular file (or nothing) is replaced: a directory or a device at
  // the path fails here, before the state file is written beside it.
  struct stat target;
  const bool had_onnx = ::lstat(onnx_path.c_str(), &target) == 0;
  if (had_onnx && !S_ISREG(target.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("write ", onnx_path, ": it exists and is not a regular file"));
  }
  // State first: until the ONNX rename, readers see the old ONNX file, whose step and id no
  // longer match the new state file, so they ignore it rather than mix the two writes.
  if (absl::Status status = WriteFileAtomically(state_path, *state_bytes); !status.ok()) {
    return status;
  }
  absl::Status written = WriteFileAtomically(onnx_path, *onnx_bytes);
  // A first checkpoint that failed leaves nothing behind. Over an older one,
  // the new state file stays beside the old ONNX file, which it does not
  // match, so readers ignore it.
  if (!written.ok() && !had_onnx) ::unlink(state_path.c_str());
  return written;
}

absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const std::string& onnx_path) {
  absl::StatusOr<std::string> bytes = ReadFile(onnx_path);
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto model;
  if (!model.ParseFromString(*bytes)) return Invalid(onnx_path, "not an ONNX model (cannot parse)");
  bytes->clear();
  bytes->shrink_to_fit();

  LoadedCheckpoint loaded;
  for (const onnx::TensorProto& proto : model.graph().initializer()) {
    if (proto.data_type() != onnx::TensorProto::FLOAT) continue;
    absl::StatusOr<Tensor> tensor = TensorFromFile(proto, onnx_path);
    if (!tensor.ok()) return tensor.status();
    loaded.checkpoint.parameters.emplace(proto.name(), *std::move(tensor));
  }
  const std::string* step = FindMetadata(model, kStepKey);
  if (step == nullptr) return loaded;
  absl::StatusOr<int64_t> parsed = ParseStep(onnx_path, *step);
  if (!parsed.ok()) return parsed.status();
  loaded.checkpoint.step = *parsed;
  loaded.has_step = true;
  const std::string* id = FindMetadata(model, kIdKey);
  if (id == nullptr) return loaded;
  if (absl::Status status = ReadState(CheckpointStatePath(onnx_path), *parsed, *id, &loaded);
      !status.ok()) {
    return status;
  }
  return loaded;
}

}  // namespace replicad
