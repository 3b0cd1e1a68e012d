// Optimizer: parity with torch.optim (SGD, Adam, RMSprop) through
// torch_optimizer_reference.py, run at test time with Debian's /usr/bin/python3 (which has
// python3-torch; scripts/install-deps.sh installs it; REPLICAD_PARITY_PYTHON overrides the
// interpreter, as for tests/parity). Without torch the parity test fails rather than skips:
// it is the only check that the update rules are PyTorch's.
#include "core/train/optimizer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

// Per element, after each of 5 steps: |ours - torch| <= kRelTolerance * |torch| +
// kAbsTolerance. We round like PyTorch's scalar kernels; its vectorized ones may fuse a
// multiply-add, so a few float32 ulps of difference (~1e-7 relative) are expected, and
// the absolute term covers values that pass near zero. A wrong rule (a missing bias
// correction, eps inside the square root, dampening, a first-step momentum of zero) is
// off by far more.
constexpr double kRelTolerance = 1e-6;
constexpr double kAbsTolerance = 1e-7;

using Floats = std::vector<float>;

struct ReferenceCase {
  std::string name;
  OptimizerConfig config;
  std::vector<int64_t> sizes;
  std::vector<Floats> init;                 // [param]
  std::vector<std::vector<Floats>> grads;   // [step - 1][param]
  std::vector<std::vector<Floats>> params;  // [step - 1][param], after the step
  std::map<std::string, Floats> state;      // After the last step.
};

std::string FromEnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

Floats ParseFloats(std::istringstream& in) {
  Floats values;
  std::string token;
  while (in >> token) values.push_back(std::strtof(token.c_str(), nullptr));
  return values;
}

// Sets *config from "key=value" tokens; returns false on an unknown key or kind.
bool ParseConfig(std::istringstream& in, OptimizerConfig* config) {
  std::string token;
  while (in >> token) {
    const size_t eq = token.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = token.substr(0, eq);
    const std::string value = token.substr(eq + 1);
    const float f = std::strtof(value.c_str(), nullptr);
    if (key == "kind") {
      if (value == "sgd") {
        config->kind = OptimizerConfig::Kind::kSgd;
      } else if (value == "adam") {
        config->kind = OptimizerConfig::Kind::kAdam;
      } else if (value == "rmsprop") {
        config->kind = OptimizerConfig::Kind::kRmsprop;
      } else {
        return false;
      }
    } else if (key == "lr") {
      config->learning_rate = f;
    } else if (key == "momentum") {
      config->momentum = f;
    } else if (key == "nesterov") {
      config->nesterov = value == "1";
    } else if (key == "weight_decay") {
      config->weight_decay = f;
    } else if (key == "beta1") {
      config->beta1 = f;
    } else if (key == "beta2") {
      config->beta2 = f;
    } else if (key == "epsilon") {
      config->epsilon = f;
    } else if (key == "alpha") {
      config->alpha = f;
    } else {
      return false;
    }
  }
  return true;
}

// Reads the script's output (format in its docstring); an empty result with *error set
// when a line does not parse.
std::vector<ReferenceCase> ParseReference(const std::string& path, std::string* error) {
  std::ifstream file(path);
  std::vector<ReferenceCase> cases;
  if (!file) {
    *error = path + " cannot be read";
    return {};
  }
  std::string line;
  int line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    std::istringstream in(line);
    std::string record;
    if (!(in >> record) || record[0] == '#' || record == "end") continue;
    bool ok = true;
    if (record == "case") {
      cases.emplace_back();
      ok = static_cast<bool>(in >> cases.back().name);
    } else if (cases.empty()) {
      ok = false;
    } else if (record == "config") {
      ok = ParseConfig(in, &cases.back().config);
    } else if (record == "sizes") {
      int64_t size = 0;
      while (in >> size) cases.back().sizes.push_back(size);
    } else if (record == "init") {
      size_t i = 0;
      ok = static_cast<bool>(in >> i) && i == cases.back().init.size();
      cases.back().init.push_back(ParseFloats(in));
    } else if (record == "grad" || record == "param") {
      size_t step = 0, i = 0;
      ok = static_cast<bool>(in >> step >> i) && step >= 1;
      auto& table = record == "grad" ? cases.back().grads : cases.back().params;
      if (ok && table.size() < step) table.resize(step);
      if (ok) ok = i == table[step - 1].size();
      if (ok) table[step - 1].push_back(ParseFloats(in));
    } else if (record == "state") {
      std::string name;
      ok = static_cast<bool>(in >> name);
      cases.back().state[name] = ParseFloats(in);
    } else {
      ok = false;
    }
    if (!ok) {
      *error = absl::StrCat(path, ":", line_number, ": cannot parse \"", line, "\"");
      return {};
    }
  }
  return cases;
}

// The script's cases, generated once per process; a test fails with the reason (and the
// script's output) when torch is missing or the file does not parse.
const std::vector<ReferenceCase>& ReferenceCases(std::string* error) {
  static std::string* const failure = new std::string;
  static const std::vector<ReferenceCase>* const cases = [] {
    const std::string python = FromEnvOr("REPLICAD_PARITY_PYTHON", "/usr/bin/python3");
    const std::string out =
        absl::StrCat(::testing::TempDir(), "torch_optimizer_reference_", getpid(), ".txt");
    testing::CommandResult run = testing::RunCommand({python, REPLICAD_OPTIMIZER_SCRIPT, out});
    if (run.exit_code != 0) {
      *failure = absl::StrCat(python, " ", REPLICAD_OPTIMIZER_SCRIPT, " exited ", run.exit_code,
                              " (torch under /usr/bin/python3 is required;"
                              " scripts/install-deps.sh installs python3-torch):\n",
                              run.out);
      return new std::vector<ReferenceCase>;
    }
    auto* parsed = new std::vector<ReferenceCase>(ParseReference(out, failure));
    std::remove(out.c_str());
    return parsed;
  }();
  *error = *failure;
  return *cases;
}

// Records a failure for the first element out of tolerance; returns the largest relative
// error (difference over |expected| + kAbsTolerance / kRelTolerance) for the report.
double ExpectClose(const Floats& expected, const float* actual, size_t n, const std::string& what) {
  EXPECT_EQ(expected.size(), n) << what;
  double worst = 0;
  for (size_t j = 0; j < std::min(n, expected.size()); ++j) {
    const double e = expected[j];
    const double diff = std::abs(static_cast<double>(actual[j]) - e);
    worst = std::max(worst, diff / (std::abs(e) + kAbsTolerance / kRelTolerance));
    if (!(diff <= kRelTolerance * std::abs(e) + kAbsTolerance)) {
      ADD_FAILURE() << what << "[" << j << "]: replicad " << actual[j] << ", torch " << e
                    << " (difference " << diff << ")";
      return worst;
    }
  }
  return worst;
}

// Host mode: State() is always OK.
std::vector<std::pair<std::string, Tensor>> StateOf(const Optimizer& optimizer) {
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = optimizer.State();
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *std::move(state) : std::vector<std::pair<std::string, Tensor>>{};
}

TEST(OptimizerTorchParityTest, FiveStepsMatchTorchOptim) {
  std::string error;
  const std::vector<ReferenceCase>& cases = ReferenceCases(&error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(cases.size(), 9u) << "torch_optimizer_reference.py wrote too few cases";
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.init.size(), c.sizes.size());
    ASSERT_EQ(c.grads.size(), 5u);
    ASSERT_EQ(c.params.size(), 5u);
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(c.config, c.sizes);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    std::vector<Floats> params = c.init;
    double worst = 0;
    for (size_t step = 1; step <= c.grads.size(); ++step) {
      std::vector<float*> p;
      std::vector<const float*> g;
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_EQ(c.grads[step - 1][i].size(), params[i].size());
        p.push_back(params[i].data());
        g.push_back(c.grads[step - 1][i].data());
      }
      ASSERT_TRUE((*optimizer)->Step(p, g).ok());
      for (size_t i = 0; i < params.size(); ++i) {
        worst =
            std::max(worst, ExpectClose(c.params[step - 1][i], params[i].data(), params[i].size(),
                                        absl::StrCat("step ", step, " param", i)));
      }
    }
    // The state names and values are torch's own (its state dict keys per parameter).
    std::map<std::string, Tensor> ours;
    for (auto& [name, tensor] : StateOf(**optimizer)) ours[name] = tensor;
    std::vector<std::string> our_names, torch_names;
    for (const auto& entry : ours) our_names.push_back(entry.first);
    for (const auto& entry : c.state) torch_names.push_back(entry.first);
    EXPECT_EQ(our_names, torch_names);
    for (const auto& [name, values] : c.state) {
      auto it = ours.find(name);
      if (it == ours.end()) continue;
      worst = std::max(worst, ExpectClose(values, it->second.data<float>(),
                                          it->second.num_elements(), "state " + name));
    }
    std::cout << c.name << ": largest relative difference " << worst << std::endl;
  }
}

absl::Status Validate(void (*edit)(OptimizerConfig&)) {
  OptimizerConfig config;
  edit(config);
  return ValidateOptimizerConfig(config);
}

TEST(OptimizerConfigTest, DefaultsOfEveryKindAreValid) {
  for (auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdam,
                    OptimizerConfig::Kind::kRmsprop}) {
    OptimizerConfig config;
    config.kind = kind;
    EXPECT_TRUE(ValidateOptimizerConfig(config).ok()) << OptimizerKindName(kind);
  }
}

TEST(OptimizerConfigTest, ErrorsNameTheFieldTheRangeAndTheValue) {
  absl::Status s = Validate([](OptimizerConfig& c) { c.learning_rate = -1; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "optimizer.learning_rate must be > 0 and <= 10000; received -1");
  EXPECT_THAT(Validate([](OptimizerConfig& c) { c.learning_rate = 0; }).message(),
              HasSubstr("optimizer.learning_rate must be > 0 and <= 10000; received 0"));
  EXPECT_THAT(Validate([](OptimizerConfig& c) { c.learning_rate = INFINITY; }).message(),
              HasSubstr("optimizer.learning_rate must be > 0 and <= 10000; received inf"));
  EXPECT_THAT(Validate([](OptimizerConfig& c) { c.learning_rate = NAN; }).message(),
              HasSubstr("optimizer.learning_rate must be > 0 and <= 10000; received nan"));
  // The case: 1e38 was accepted, and one step made every weight infinite.
  EXPECT_THAT(Validate([](OptimizerConfig& c) { c.learning_rate = 1e38f; }).message(),
              HasSubstr("optimizer.learning_rate must be > 0 and <= 10000; received 1e+38"));
  EXPECT_THAT(Validate([](OptimizerConfig& c) { c.learning_rate = 10001; }).message(),
              HasSubstr("received 10001"));
  EXPECT_TRUE(Validate([](OptimizerConfig& c) { c.learning_rate = 10000; }).ok());
  EXPECT_THAT(Validate([](OptimizerConfig& c) { c.weight_decay = 1e30f; }).message(),
              HasSubstr("optimizer.weight_decay must be >= 0 and <= 10000; received 1e+30"));
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.momentum = -0.5f; }).message(),
            "optimizer.momentum must be finite and >= 0; received -0.5");
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.weight_decay = -0.25f; }).message(),
            "optimizer.weight_decay must be >= 0 and <= 10000; received -0.25");
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.nesterov = true; }).message(),
            "optimizer.nesterov requires optimizer.momentum > 0; received momentum 0");
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.beta1 = 1; }).message(),
            "optimizer.beta1 must be in [0, 1); received 1");
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.beta2 = -0.5f; }).message(),
            "optimizer.beta2 must be in [0, 1); received -0.5");
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.epsilon = 0; }).message(),
            "optimizer.epsilon must be finite and > 0; received 0");
  EXPECT_EQ(Validate([](OptimizerConfig& c) { c.alpha = 1.5f; }).message(),
            "optimizer.alpha must be in [0, 1); received 1.5");
  EXPECT_THAT(Validate([](OptimizerConfig& c) {
                c.kind = static_cast<OptimizerConfig::Kind>(7);
              }).message(),
              HasSubstr("optimizer.kind must be sgd, adam or rmsprop; received 7"));
  EXPECT_TRUE(Validate([](OptimizerConfig& c) {
                c.nesterov = true;
                c.momentum = 0.9f;
                c.beta1 = 0;
                c.alpha = 0;
              }).ok());
}

TEST(OptimizerConfigTest, KindNames) {
  EXPECT_EQ(OptimizerKindName(OptimizerConfig::Kind::kSgd), "sgd");
  EXPECT_EQ(OptimizerKindName(OptimizerConfig::Kind::kAdam), "adam");
  EXPECT_EQ(OptimizerKindName(OptimizerConfig::Kind::kRmsprop), "rmsprop");
}

TEST(OptimizerTest, CreateRejectsAnInvalidConfigAndNegativeSizes) {
  OptimizerConfig config;
  config.epsilon = -1;
  EXPECT_THAT(Optimizer::Create(config, {4}).status().message(), HasSubstr("optimizer.epsilon"));
  absl::StatusOr<std::unique_ptr<Optimizer>> negative = Optimizer::Create({}, {4, -3});
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message(), "parameter_sizes[1] must be >= 0; received -3");
}

TEST(OptimizerTest, WithoutADeviceItRunsOnTheHost) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create({}, {4, 0}, nullptr);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  EXPECT_EQ((*optimizer)->device(), nullptr);
  std::vector<float> p = {1, 2, 3, 4};
  const std::vector<float> g = {1, 1, 1, 1};
  // An empty parameter's pointers may be null.
  ASSERT_TRUE((*optimizer)->Step({p.data(), nullptr}, {g.data(), nullptr}).ok());
  EXPECT_FLOAT_EQ(p[0], 1 - 0.01f);
  EXPECT_EQ((*optimizer)->step(), 1);
}

TEST(OptimizerTest, StateNamesAreTheOpsOutputsAfterP) {
  for (auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdam,
                    OptimizerConfig::Kind::kRmsprop}) {
    for (float momentum : {0.0f, 0.5f}) {
      const std::vector<std::string> names = OptimizerStateNames(kind, momentum);
      const OptimizerStateIndex index = OptimizerStateIndexOf(kind, momentum);
      const std::pair<int, std::string> roles[] = {{index.momentum_buffer, "momentum_buffer"},
                                                   {index.exp_avg, "exp_avg"},
                                                   {index.exp_avg_sq, "exp_avg_sq"},
                                                   {index.square_avg, "square_avg"}};
      std::vector<std::string> found(names.size());
      for (const auto& [i, name] : roles) {
        if (i < 0) continue;
        ASSERT_LT(i, static_cast<int>(names.size())) << name;
        found[i] = name;
      }
      EXPECT_EQ(found, names) << OptimizerKindName(kind) << " momentum " << momentum;
    }
  }
}

// Two parameters (5 and 3 elements) and a deterministic gradient for each step.
struct Problem {
  std::vector<int64_t> sizes = {5, 3};
  std::vector<Floats> params = {{0.5f, -1.0f, 2.0f, 0.0f, -0.25f}, {1.5f, -0.75f, 0.1f}};

  static std::vector<Floats> Gradient(int step) {
    std::vector<Floats> g = {Floats(5), Floats(3)};
    for (size_t i = 0; i < g.size(); ++i) {
      for (size_t j = 0; j < g[i].size(); ++j) {
        g[i][j] = std::sin(0.7f * static_cast<float>(step * 11 + i * 5 + j)) * (1 + step);
      }
    }
    return g;
  }

  void Step(Optimizer& optimizer, int step) {
    std::vector<Floats> g = Gradient(step);
    EXPECT_TRUE(
        optimizer.Step({params[0].data(), params[1].data()}, {g[0].data(), g[1].data()}).ok());
  }
};

OptimizerConfig Config(OptimizerConfig::Kind kind) {
  OptimizerConfig config;
  config.kind = kind;
  config.learning_rate = 0.05f;
  config.weight_decay = 0.01f;
  if (kind != OptimizerConfig::Kind::kAdam) config.momentum = 0.9f;
  if (kind == OptimizerConfig::Kind::kSgd) config.nesterov = true;
  return config;
}

class OptimizerKindTest : public ::testing::TestWithParam<OptimizerConfig::Kind> {};

TEST_P(OptimizerKindTest, RestoredStateContinuesBitwiseIdentically) {
  const OptimizerConfig config = Config(GetParam());
  Problem original;
  std::unique_ptr<Optimizer> a = *Optimizer::Create(config, original.sizes);
  for (int step = 0; step < 3; ++step) original.Step(*a, step);

  Problem restored = original;
  std::unique_ptr<Optimizer> b = *Optimizer::Create(config, restored.sizes);
  ASSERT_TRUE(b->Restore(a->step(), StateOf(*a)).ok());
  EXPECT_EQ(b->step(), 3);
  // Without the state the next steps differ: the round trip is what carries them.
  Problem stateless = original;
  std::unique_ptr<Optimizer> c = *Optimizer::Create(config, stateless.sizes);

  for (int step = 3; step < 5; ++step) {
    original.Step(*a, step);
    restored.Step(*b, step);
    stateless.Step(*c, step);
  }
  EXPECT_EQ(a->step(), 5);
  EXPECT_EQ(b->step(), 5);
  for (size_t i = 0; i < original.params.size(); ++i) {
    EXPECT_EQ(std::memcmp(original.params[i].data(), restored.params[i].data(),
                          original.params[i].size() * sizeof(float)),
              0)
        << "param" << i;
    EXPECT_NE(original.params[i], stateless.params[i]) << "param" << i;
  }
}

TEST_P(OptimizerKindTest, ReplicasGivenTheSameGradientsStayBitwiseIdentical) {
  Problem r0, r1;
  std::unique_ptr<Optimizer> o0 = *Optimizer::Create(Config(GetParam()), r0.sizes);
  std::unique_ptr<Optimizer> o1 = *Optimizer::Create(Config(GetParam()), r1.sizes);
  for (int step = 0; step < 4; ++step) {
    r0.Step(*o0, step);
    r1.Step(*o1, step);
  }
  for (size_t i = 0; i < r0.params.size(); ++i) {
    EXPECT_EQ(
        std::memcmp(r0.params[i].data(), r1.params[i].data(), r0.params[i].size() * sizeof(float)),
        0);
  }
}

TEST_P(OptimizerKindTest, StepCountsEveryStepAndRestoreSetsIt) {
  Problem problem;
  std::unique_ptr<Optimizer> optimizer = *Optimizer::Create(Config(GetParam()), problem.sizes);
  EXPECT_EQ(optimizer->step(), 0);
  EXPECT_TRUE(StateOf(*optimizer).empty());  // Allocated on the first step, as in PyTorch.
  for (int step = 0; step < 4; ++step) {
    problem.Step(*optimizer, step);
    EXPECT_EQ(optimizer->step(), step + 1);
  }
  std::unique_ptr<Optimizer> fresh = *Optimizer::Create(Config(GetParam()), problem.sizes);
  ASSERT_TRUE(fresh->Restore(4, StateOf(*optimizer)).ok());
  EXPECT_EQ(fresh->step(), 4);
  problem.Step(*fresh, 4);
  EXPECT_EQ(fresh->step(), 5);
  ASSERT_TRUE(fresh->Restore(0, {}).ok());
  EXPECT_EQ(fresh->step(), 0);
  EXPECT_TRUE(StateOf(*fresh).empty());
}

INSTANTIATE_TEST_SUITE_P(Kinds, OptimizerKindTest,
                         ::testing::Values(OptimizerConfig::Kind::kSgd,
                                           OptimizerConfig::Kind::kAdam,
                                           OptimizerConfig::Kind::kRmsprop),
                         [](const auto& info) { return OptimizerKindName(info.param); });

std::vector<std::string> Names(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::string> names;
  for (const auto& entry : state) names.push_back(entry.first);
  return names;
}

TEST(OptimizerTest, StateHoldsOnlyWhatTheKindUses) {
  auto names_after_one_step = [](OptimizerConfig config) {
    Problem problem;
    std::unique_ptr<Optimizer> optimizer = *Optimizer::Create(config, problem.sizes);
    problem.Step(*optimizer, 0);
    return Names(StateOf(*optimizer));
  };
  OptimizerConfig sgd;
  EXPECT_TRUE(names_after_one_step(sgd).empty());
  sgd.momentum = 0.5f;
  EXPECT_EQ(names_after_one_step(sgd),
            (std::vector<std::string>{"param0.momentum_buffer", "param1.momentum_buffer"}));
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::kAdam;
  adam.momentum = 0.5f;  // Not Adam's: no buffer.
  EXPECT_EQ(names_after_one_step(adam),
            (std::vector<std::string>{"param0.exp_avg", "param0.exp_avg_sq", "param1.exp_avg",
                                      "param1.exp_avg_sq"}));
  OptimizerConfig rmsprop;
  rmsprop.kind = OptimizerConfig::Kind::kRmsprop;
  EXPECT_EQ(names_after_one_step(rmsprop),
            (std::vector<std::string>{"param0.square_avg", "param1.square_avg"}));
  rmsprop.momentum = 0.5f;
  EXPECT_EQ(names_after_one_step(rmsprop),
            (std::vector<std::string>{"param0.momentum_buffer", "param0.square_avg",
                                      "param1.momentum_buffer", "param1.square_avg"}));

  Problem problem;
  std::unique_ptr<Optimizer> optimizer = *Optimizer::Create(adam, problem.sizes);
  problem.Step(*optimizer, 0);
  for (const auto& [name, tensor] : StateOf(*optimizer)) {
    EXPECT_EQ(tensor.dtype(), DType::kFloat32) << name;
    EXPECT_EQ(tensor.shape(), (Shape{name.rfind("param0", 0) == 0 ? 5 : 3})) << name;
  }
}

TEST(OptimizerTest, RestoreNamesTheEntryThatDoesNotMatchAndChangesNothing) {
  OptimizerConfig config = Config(OptimizerConfig::Kind::kAdam);
  Problem problem;
  std::unique_ptr<Optimizer> source = *Optimizer::Create(config, problem.sizes);
  problem.Step(*source, 0);
  problem.Step(*source, 1);
  const std::vector<std::pair<std::string, Tensor>> good = StateOf(*source);

  std::unique_ptr<Optimizer> target = *Optimizer::Create(config, problem.sizes);
  problem.Step(*target, 0);
  const std::vector<std::pair<std::string, Tensor>> before = StateOf(*target);
  auto expect_rejected = [&](int64_t step, std::vector<std::pair<std::string, Tensor>> state,
                             const std::string& message) {
    absl::Status status = target->Restore(step, state);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr(message));
    EXPECT_EQ(target->step(), 1);
    const std::vector<std::pair<std::string, Tensor>> after = StateOf(*target);
    ASSERT_EQ(Names(after), Names(before));
    for (size_t k = 0; k < after.size(); ++k) {
      EXPECT_EQ(std::memcmp(after[k].second.raw_data(), before[k].second.raw_data(),
                            after[k].second.byte_size()),
                0);
    }
  };

  std::vector<std::pair<std::string, Tensor>> renamed = good;
  renamed[0].first = "param0.momentum_buffer";
  expect_rejected(2, renamed,
                  "optimizer state entry param0.momentum_buffer is not used by adam with 2 "
                  "parameters at step 2");
  std::vector<std::pair<std::string, Tensor>> resized = good;
  resized[1].second = Tensor::Host(DType::kFloat32, {4});
  expect_rejected(2, resized,
                  "optimizer state entry param0.exp_avg_sq must be a host float32 tensor of 5 "
                  "elements; received float32[4] in host");
  std::vector<std::pair<std::string, Tensor>> int64 = good;
  int64[2].second = Tensor::Host(DType::kInt64, {3});
  expect_rejected(2, int64, "param1.exp_avg must be a host float32 tensor of 3 elements");
  std::vector<std::pair<std::string, Tensor>> missing = good;
  missing.pop_back();
  expect_rejected(2, missing,
                  "optimizer state entry param1.exp_avg_sq is missing (adam at step 2)");
  std::vector<std::pair<std::string, Tensor>> duplicate = good;
  duplicate.push_back(good[0]);
  expect_rejected(2, duplicate, "optimizer state entry param0.exp_avg appears twice");
  expect_rejected(0, good, "param0.exp_avg is not used by adam with 2 parameters at step 0");
  expect_rejected(-1, good, "optimizer state step must be >= 0; received -1");
  std::vector<std::pair<std::string, Tensor>> empty_tensor = good;
  empty_tensor[0].second = Tensor();
  expect_rejected(2, empty_tensor, "received an empty tensor");

  ASSERT_TRUE(target->Restore(2, good).ok());
  EXPECT_EQ(target->step(), 2);
}

// Finite gradients can still overflow an update: the dry run finds the
// element without changing the weights or the state, and agrees with what
// Step then writes, for every kind. SGD's update grows with the gradient and
// overflows; Adam's and RMSprop's are normalised by it and stay finite.
TEST(OptimizerTest, FirstNonFiniteUpdateFindsOverflowWithoutChangingAnything) {
  for (OptimizerConfig::Kind kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdam,
                                     OptimizerConfig::Kind::kRmsprop}) {
    const std::string name = OptimizerKindName(kind);
    OptimizerConfig config;
    config.kind = kind;
    config.learning_rate = 1e4f;
    config.momentum = kind == OptimizerConfig::Kind::kAdam ? 0.0f : 0.9f;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(config, {3, 2});
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    std::vector<float> a = {1, 2, 3}, b = {4, 5};
    std::vector<float> ga = {0.5f, -0.25f, 1}, gb = {1, 1};
    ASSERT_FALSE((*optimizer)->FirstNonFiniteUpdate({a.data(), b.data()}, {ga.data(), gb.data()}));
    ASSERT_TRUE((*optimizer)->Step({a.data(), b.data()}, {ga.data(), gb.data()}).ok());
    b[1] = 3.4e38f;  // Near float32's largest value.
    const std::vector<float> a_before = a, b_before = b;
    absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state_before =
        (*optimizer)->State();
    ASSERT_TRUE(state_before.ok());
    std::vector<float> huge = {0, -3e34f};
    std::optional<Optimizer::NonFiniteUpdate> bad =
        (*optimizer)->FirstNonFiniteUpdate({a.data(), b.data()}, {ga.data(), huge.data()});
    // Nothing changed: the weights, the state and the step count.
    EXPECT_EQ(a, a_before) << name;
    EXPECT_EQ(b, b_before) << name;
    EXPECT_EQ((*optimizer)->step(), 1);
    absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state_after = (*optimizer)->State();
    ASSERT_TRUE(state_after.ok());
    ASSERT_EQ(state_after->size(), state_before->size());
    for (size_t i = 0; i < state_after->size(); ++i) {
      const Tensor& x = (*state_before)[i].second;
      const Tensor& y = (*state_after)[i].second;
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.byte_size()), 0) << name << " " << i;
    }
    ASSERT_TRUE((*optimizer)->Step({a.data(), b.data()}, {ga.data(), huge.data()}).ok());
    EXPECT_EQ(bad.has_value(), !std::isfinite(b[1])) << name << " " << b[1];
    if (kind == OptimizerConfig::Kind::kSgd) {
      ASSERT_TRUE(bad);
      EXPECT_EQ(bad->parameter, 1u);
      EXPECT_EQ(bad->element, 1);
      EXPECT_EQ(bad->before, 3.4e38f);
      EXPECT_EQ(bad->gradient, -3e34f);
      EXPECT_FALSE(std::isfinite(bad->after)) << bad->after;
    }
  }
}

}  // namespace
}  // namespace replicad
