#include "core/train/training_config.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/client_text.h"
#include "core/base/narrow_float.h"
#include "core/base/status_macros.h"
#include "core/train/optimizer.h"

namespace replicad {
namespace {

// The names replicad.v1's enums give these values (the text format's).
constexpr const char* kLossNames[] = {"LOSS_SOFTMAX_CROSS_ENTROPY", "LOSS_MEAN_SQUARED_ERROR"};
constexpr const char* kOptimizerNames[] = {"OPTIMIZER_SGD", "OPTIMIZER_ADAM", "OPTIMIZER_RMSPROP"};
constexpr const char* kReductionNames[] = {"GRADIENT_REDUCTION_ALLREDUCE", "GRADIENT_REDUCTION_PS"};
constexpr const char* kNonFiniteNames[] = {"NON_FINITE_STEPS_REFUSE", "NON_FINITE_STEPS_SKIP"};

std::string Quoted(const std::string& text) {
  return absl::StrCat("\"", absl::CEscape(text), "\"");
}

// The text format as PrintToString writes it: `name: value` and
// `name { ... }`, with "#" comments; strings quoted with C escapes.
class TextReader {
 public:
  explicit TextReader(absl::string_view text) : text_(text) {}

  bool AtEnd() {
    SkipSpace();
    return at_ >= text_.size();
  }
  bool Take(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  // A field name, an enum name, a number or a bool.
  absl::StatusOr<std::string> Word() {
    SkipSpace();
    const size_t begin = at_;
    while (at_ < text_.size() &&
           (absl::ascii_isalnum(text_[at_]) || std::strchr("_.+-", text_[at_]) != nullptr)) {
      ++at_;
    }
    if (at_ == begin) return Error("a name or a value");
    return std::string(text_.substr(begin, at_ - begin));
  }
  absl::StatusOr<std::string> String() {
    SkipSpace();
    if (at_ >= text_.size() || (text_[at_] != '"' && text_[at_] != '\'')) {
      return Error("a quoted string");
    }
    const char quote = text_[at_++];
    const size_t begin = at_;
    while (at_ < text_.size() && text_[at_] != quote && text_[at_] != '\n') {
      at_ += text_[at_] == '\\' ? 2 : 1;
    }
    if (at_ >= text_.size() || text_[at_] != quote) {
      at_ = begin;  // The line the string starts on.
      return Error("the string's closing quote");
    }
    std::string unescaped;
    if (!absl::CUnescape(text_.substr(begin, at_ - begin), &unescaped)) {
      return Error("a string with valid escapes");
    }
    ++at_;
    return unescaped;
  }
  absl::Status Error(absl::string_view expected) const {
    int line = 1;
    for (size_t i = 0; i < at_ && i < text_.size(); ++i) line += text_[i] == '\n';
    return absl::InvalidArgumentError(
        absl::StrCat("training configuration, line ", line, ": expected ", expected));
  }

 private:
  void SkipSpace() {
    while (at_ < text_.size()) {
      if (absl::ascii_isspace(text_[at_])) {
        ++at_;
      } else if (text_[at_] == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') ++at_;
      } else {
        break;
      }
    }
  }

  absl::string_view text_;
  size_t at_ = 0;
};

// An enum field's value, by name or number; 0 (the proto's UNSPECIFIED) is
// the default, numbers count the names from 1.
template <typename Enum, size_t N>
absl::Status ReadEnum(TextReader& in, const char* field, const char* const (&names)[N], Enum* out) {
  REPLICAD_ASSIGN_OR_RETURN(std::string word, in.Word());
  int number = -1;
  if (absl::SimpleAtoi(word, &number)) {
    if (number == 0) return absl::OkStatus();  // Unspecified: the default stays.
  } else if (absl::EndsWith(word, "_UNSPECIFIED")) {
    return absl::OkStatus();
  } else {
    for (size_t i = 0; i < N; ++i) {
      if (word == names[i]) number = static_cast<int>(i) + 1;
    }
  }
  if (number < 1 || number > static_cast<int>(N)) {
    return in.Error(absl::StrCat("a value of ", field, ", not '", ClientText(word), "'"));
  }
  *out = static_cast<Enum>(number - 1);
  return absl::OkStatus();
}

absl::Status ReadFloat(TextReader& in, float* out) {
  REPLICAD_ASSIGN_OR_RETURN(std::string word, in.Word());
  double value = 0;
  if (!absl::SimpleAtod(word, &value)) return in.Error("a number");
  *out = NarrowToFloat(value);
  return absl::OkStatus();
}

absl::Status ReadBool(TextReader& in, bool* out) {
  REPLICAD_ASSIGN_OR_RETURN(std::string word, in.Word());
  if (word == "true" || word == "t" || word == "1") {
    *out = true;
  } else if (word == "false" || word == "f" || word == "0") {
    *out = false;
  } else {
    return in.Error("true or false");
  }
  return absl::OkStatus();
}

template <typename Int>
absl::Status ReadInt(TextReader& in, Int* out) {
  REPLICAD_ASSIGN_OR_RETURN(std::string word, in.Word());
  if (!absl::SimpleAtoi(word, out)) return in.Error("an integer");
  return absl::OkStatus();
}

// Skips a value this build does not know: a scalar, a string or a message.
absl::Status SkipValue(TextReader& in, bool had_colon) {
  if (in.Take('{')) {
    int depth = 1;
    while (depth > 0) {
      if (in.AtEnd()) return in.Error("'}'");
      if (in.Take('{')) {
        ++depth;
      } else if (in.Take('}')) {
        --depth;
      } else if (!in.Take(':') && !in.String().ok() && !in.Word().ok()) {
        return in.Error("a field");
      }
    }
    return absl::OkStatus();
  }
  if (!had_colon) return in.Error("':' or '{'");
  if (in.String().ok()) return absl::OkStatus();
  return in.Word().status();
}

absl::Status ReadOptimizer(TextReader& in, OptimizerConfig* o) {
  while (!in.Take('}')) {
    if (in.AtEnd()) return in.Error("'}' closing optimizer");
    REPLICAD_ASSIGN_OR_RETURN(std::string field, in.Word());
    const bool colon = in.Take(':');
    absl::Status read;
    if (field == "kind") {
      read = ReadEnum(in, "optimizer.kind", kOptimizerNames, &o->kind);
    } else if (field == "learning_rate") {
      read = ReadFloat(in, &o->learning_rate);
    } else if (field == "momentum") {
      read = ReadFloat(in, &o->momentum);
    } else if (field == "nesterov") {
      read = ReadBool(in, &o->nesterov);
    } else if (field == "weight_decay") {
      read = ReadFloat(in, &o->weight_decay);
    } else if (field == "beta1") {
      read = ReadFloat(in, &o->beta1);
    } else if (field == "beta2") {
      read = ReadFloat(in, &o->beta2);
    } else if (field == "epsilon") {
      read = ReadFloat(in, &o->epsilon);
    } else if (field == "alpha") {
      read = ReadFloat(in, &o->alpha);
    } else {
      read = SkipValue(in, colon);
    }
    REPLICAD_RETURN_IF_ERROR(read);
  }
  return absl::OkStatus();
}

absl::Status ReadString(TextReader& in, std::string* out) {
  REPLICAD_ASSIGN_OR_RETURN(*out, in.String());
  return absl::OkStatus();
}

// One top-level field, its name already read.
absl::Status ReadField(TextReader& in, const std::string& field, TrainingConfig* config) {
  const bool colon = in.Take(':');
  if (field == "optimizer") {
    if (!in.Take('{')) return in.Error("'{' opening optimizer");
    return ReadOptimizer(in, &config->optimizer);
  }
  if (field == "loss") return ReadEnum(in, "loss", kLossNames, &config->loss);
  if (field == "reduction") return ReadEnum(in, "reduction", kReductionNames, &config->reduction);
  if (field == "non_finite_steps") {
    return ReadEnum(in, "non_finite_steps", kNonFiniteNames, &config->non_finite_steps);
  }
  if (field == "output") return ReadString(in, &config->output);
  if (field == "ps_device") return ReadString(in, &config->ps_device);
  if (field == "checkpoint_dir") return ReadString(in, &config->checkpoint_dir);
  if (field == "sync_batch_norm") return ReadBool(in, &config->sync_batch_norm);
  if (field == "seed") return ReadInt(in, &config->seed);
  if (field == "checkpoint_every_steps") return ReadInt(in, &config->checkpoint_every_steps);
  if (field == "initial_loss_scale") return ReadFloat(in, &config->loss_scaling.initial_scale);
  if (field == "loss_scale_growth_interval") {
    return ReadInt(in, &config->loss_scaling.growth_interval);
  }
  if (field == "precision") {
    std::string name;
    REPLICAD_RETURN_IF_ERROR(ReadString(in, &name));
    if (name.empty()) return absl::OkStatus();
    absl::StatusOr<ComputePrecision> precision = ParseComputePrecision(name, "precision");
    // A text that names one this build does not train in is malformed here.
    if (!precision.ok()) return absl::InvalidArgumentError(precision.status().message());
    config->precision = *precision;
    return absl::OkStatus();
  }
  return SkipValue(in, colon);
}

}  // namespace

std::string ShortestDecimal(float value) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, end.ptr);
}

absl::StatusOr<TrainingConfig> CompleteTrainingConfig(TrainingConfig config, const Model& model,
                                                      const std::vector<DeviceInfo>& devices) {
  if (config.output.empty()) config.output = model.outputs()[0].name;
  if (model.OutputIndex(config.output) < 0) {
    std::string names;
    for (const TensorSpec& s : model.outputs())
      absl::StrAppend(&names, names.empty() ? "" : ", ", s.name);
    return absl::InvalidArgumentError(absl::StrCat("config.output: model '", model.name(),
                                                   "' has no output '", ClientText(config.output),
                                                   "'; expected one of: ", names));
  }
  if (config.reduction == TrainingConfig::Reduction::kParameterServer) {
    if (config.ps_device.empty()) {
      return absl::InvalidArgumentError(
          "config.ps_device must name the parameter server's device (e.g. cpu:0) for "
          "reduction 'ps'");
    }
    absl::StatusOr<DeviceId> ps = ParseDeviceId(config.ps_device);
    if (!ps.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("config.ps_device: ", ps.status().message()));
    }
    if (FindDevice(devices, *ps) == nullptr) {
      std::string names;
      for (const DeviceInfo& d : devices) {
        absl::StrAppend(&names, names.empty() ? "" : ", ", DeviceIdToString(d.id));
      }
      return absl::InvalidArgumentError(absl::StrCat("config.ps_device: '",
                                                     ClientText(config.ps_device),
                                                     "' does not exist; available: ", names));
    }
  } else if (!config.ps_device.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.ps_device is only for reduction 'ps'; received '",
                     ClientText(config.ps_device), "' with allreduce"));
  }
  if (config.checkpoint_every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.checkpoint_every_steps must be >= 0, received ", config.checkpoint_every_steps));
  }
  if (config.checkpoint_every_steps > 0 && config.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "config.checkpoint_dir must be set when config.checkpoint_every_steps > 0");
  }
  const LossScaling& scaling = config.loss_scaling;
  if (!std::isfinite(scaling.initial_scale) || scaling.initial_scale <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.initial_loss_scale must be a finite number > 0, received ", scaling.initial_scale));
  }
  if (scaling.growth_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.loss_scale_growth_interval must be >= 1, received ", scaling.growth_interval));
  }
  // The optimizer's own messages say "optimizer.x"; the RPC's field is "config.optimizer.x".
  if (absl::Status s = ValidateOptimizerConfig(config.optimizer); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("config.", s.message()));
  }
  return config;
}

TrainerOptions TrainerOptionsOf(const TrainingConfig& config, DType target_dtype) {
  TrainerOptions options;
  options.loss.kind = config.loss == TrainingConfig::Loss::kMeanSquaredError
                          ? LossSpec::Kind::kMeanSquaredError
                          : LossSpec::Kind::kSoftmaxCrossEntropy;
  options.loss.output = config.output;
  options.loss.target_dtype = target_dtype;
  options.optimizer = config.optimizer;
  options.sync_batch_norm = config.sync_batch_norm;
  options.seed = config.seed;
  options.non_finite_steps = config.non_finite_steps;
  options.precision = config.precision;
  options.loss_scaling = config.loss_scaling;
  return options;
}

uint64_t TrainingFingerprint(const TrainingConfig& config) {
  TrainingConfig shared = config;
  shared.checkpoint_dir.clear();
  shared.checkpoint_every_steps = 0;
  uint64_t hash = 14695981039346656037ull;  // FNV-1a.
  for (unsigned char c : FormatTrainingConfig(shared)) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string FormatTrainingConfig(const TrainingConfig& config) {
  const OptimizerConfig& o = config.optimizer;
  return absl::StrCat(
      "loss: ", kLossNames[static_cast<int>(config.loss)], "\n",    //
      "output: ", Quoted(config.output), "\n",                      //
      "optimizer {\n",                                              //
      "  kind: ", kOptimizerNames[static_cast<int>(o.kind)], "\n",  //
      "  learning_rate: ", ShortestDecimal(o.learning_rate), "\n",  //
      "  momentum: ", ShortestDecimal(o.momentum), "\n",            //
      "  nesterov: ", o.nesterov ? "true" : "false", "\n",          //
      "  weight_decay: ", ShortestDecimal(o.weight_decay), "\n",    //
      "  beta1: ", ShortestDecimal(o.beta1), "\n",                  //
      "  beta2: ", ShortestDecimal(o.beta2), "\n",                  //
      "  epsilon: ", ShortestDecimal(o.epsilon), "\n",              //
      "  alpha: ", ShortestDecimal(o.alpha), "\n",                  //
      "}\n",                                                        //
      "reduction: ", kReductionNames[static_cast<int>(config.reduction)], "\n",
      "ps_device: ", Quoted(config.ps_device), "\n",                         //
      "sync_batch_norm: ", config.sync_batch_norm ? "true" : "false", "\n",  //
      "seed: ", config.seed, "\n",                                           //
      "checkpoint_every_steps: ", config.checkpoint_every_steps, "\n",       //
      "checkpoint_dir: ", Quoted(config.checkpoint_dir), "\n",               //
      "non_finite_steps: ", kNonFiniteNames[static_cast<int>(config.non_finite_steps)], "\n",
      "precision: ", Quoted(std::string(ComputePrecisionName(config.precision))), "\n",
      "initial_loss_scale: ", ShortestDecimal(config.loss_scaling.initial_scale), "\n",
      "loss_scale_growth_interval: ", config.loss_scaling.growth_interval, "\n");
}

absl::StatusOr<TrainingConfig> ParseTrainingConfig(absl::string_view text) {
  TrainingConfig config;
  TextReader in(text);
  while (!in.AtEnd()) {
    REPLICAD_ASSIGN_OR_RETURN(std::string field, in.Word());
    REPLICAD_RETURN_IF_ERROR(ReadField(in, field, &config));
  }
  return config;
}

}  // namespace replicad
