// Checkpoints: a round trip through both files (and replicad's own importer), the errors,
// a state file from another write, and crash safety: a child process writing checkpoints
// of a ~4 MB model is SIGKILLed at random moments and every survivor must read back whole.
//
// The child is killed 24 times.
#include "core/train/checkpoint.h"

#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

// Gives each test fresh directories and removes them afterwards, unless the test failed
// (its files are then left for a look).
class CheckpointTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) return;
    for (const std::string& dir : dirs_) ::nftw(dir.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  }

  std::string MakeTempDir(const std::string& name) {
    std::string pattern = absl::StrCat(::testing::TempDir(), "/checkpoint_test_", name, "_XXXXXX");
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dirs_.push_back(pattern);
    return pattern;
  }

 private:
  std::vector<std::string> dirs_;
};

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  ::closedir(d);
  return names;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

Tensor Filled(const Shape& shape, const std::function<float(int64_t)>& value) {
  Tensor t = Tensor::Host(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = value(i);
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

// y = Reshape(Gemm(x, W[out,in], B[out], transB=1), shape) with an int64 initializer
// `shape`, which ReadCheckpoint must not report as a parameter.
std::string GemmModel(int64_t in, int64_t out) {
  OnnxModelBuilder b("checkpoint_test");
  b.AddInput("x", DType::kFloat32, {kAnyDim, in});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, out});
  b.AddInitializer("W", Filled({out, in}, [](int64_t i) { return 0.01f * i; }));
  b.AddInitializer("B", Filled({out}, [](int64_t) { return 0.5f; }));
  Tensor shape = Tensor::Host(DType::kInt64, {2});
  shape.data<int64_t>()[0] = -1;
  shape.data<int64_t>()[1] = out;
  b.AddInitializer("shape", shape);
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"x", "W", "B"}, {"g"}), "transB", 1);
  b.AddNode("Reshape", {"g", "shape"}, {"y"});
  return b.Serialize();
}

OptimizerConfig SgdMomentum() {
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kSgd;
  config.learning_rate = 0.1f;  // Not exact in binary: checks the exact round trip.
  config.momentum = 0.9f;
  config.nesterov = true;
  config.weight_decay = 1e-4f;
  return config;
}

void ExpectSameConfig(const OptimizerConfig& a, const OptimizerConfig& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.learning_rate, b.learning_rate);
  EXPECT_EQ(a.momentum, b.momentum);
  EXPECT_EQ(a.nesterov, b.nesterov);
  EXPECT_EQ(a.weight_decay, b.weight_decay);
  EXPECT_EQ(a.beta1, b.beta1);
  EXPECT_EQ(a.beta2, b.beta2);
  EXPECT_EQ(a.epsilon, b.epsilon);
  EXPECT_EQ(a.alpha, b.alpha);
}

// A checkpoint of GemmModel(3, 4) whose values all derive from `step`.
Checkpoint SmallCheckpoint(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.parameters["W"] = Filled({4, 3}, [step](int64_t i) { return step + 0.25f * i; });
  c.parameters["B"] = Filled({4}, [step](int64_t i) { return -step - 0.5f * i; });
  c.optimizer = SgdMomentum();
  c.optimizer_state = {
      {"param0.momentum_buffer", Filled({12}, [step](int64_t i) { return step * 2 + 0.125f * i; })},
      {"param1.momentum_buffer", Filled({4}, [step](int64_t i) { return step * 3 - 1.0f * i; })}};
  return c;
}

TEST_F(CheckpointTest, RoundTripThroughBothFilesAndTheImporter) {
  const std::string dir = MakeTempDir("round_trip");
  const std::string path = dir + "/m.onnx";
  const std::string source = GemmModel(3, 4);

  // A real optimizer's state, so Restore must accept what comes back.
  std::unique_ptr<Optimizer> optimizer = *Optimizer::Create(SgdMomentum(), {12, 4});
  Checkpoint checkpoint = SmallCheckpoint(7);
  Tensor gw = Filled({12}, [](int64_t i) { return 0.1f * i - 0.3f; });
  Tensor gb = Filled({4}, [](int64_t i) { return 1.0f - i; });
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(optimizer
                    ->Step({checkpoint.parameters["W"].data<float>(),
                            checkpoint.parameters["B"].data<float>()},
                           {gw.data<float>(), gb.data<float>()})
                    .ok());
  }
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> state = optimizer->State();
  ASSERT_TRUE(state.ok()) << state.status();
  checkpoint.optimizer_state = *std::move(state);
  ASSERT_EQ(checkpoint.optimizer_state.size(), 2u);

  ASSERT_TRUE(WriteCheckpoint(source, path, checkpoint).ok());
  EXPECT_EQ(CheckpointStatePath(path), path + ".state");
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{"m.onnx", "m.onnx.state"}));

  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->has_step);
  EXPECT_TRUE(loaded->state_matches);
  const Checkpoint& got = loaded->checkpoint;
  EXPECT_EQ(got.step, 7);
  ASSERT_EQ(got.parameters.size(), 2u);  // "shape" is int64: not a parameter.
  for (const auto& [name, tensor] : checkpoint.parameters) {
    ASSERT_EQ(got.parameters.count(name), 1u) << name;
    EXPECT_EQ(got.parameters.at(name).shape(), tensor.shape()) << name;
    EXPECT_EQ(Values(got.parameters.at(name)), Values(tensor)) << name;
  }
  ExpectSameConfig(got.optimizer, checkpoint.optimizer);
  ASSERT_EQ(got.optimizer_state.size(), checkpoint.optimizer_state.size());
  for (size_t i = 0; i < got.optimizer_state.size(); ++i) {
    EXPECT_EQ(got.optimizer_state[i].first, checkpoint.optimizer_state[i].first);
    EXPECT_TRUE(SameTensor(got.optimizer_state[i].second, checkpoint.optimizer_state[i].second))
        << got.optimizer_state[i].first;
  }
  std::unique_ptr<Optimizer> resumed = *Optimizer::Create(got.optimizer, {12, 4});
  EXPECT_TRUE(resumed->Restore(got.step, got.optimizer_state).ok());

  // replicad's importer takes it like the original, with the new weights.
  OnnxImportOptions options;
  options.optimize = false;
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxFile(path, "m", options);
  ASSERT_TRUE(model.ok()) << model.status();
  int found = 0;
  for (const auto& [index, tensor] : (*model)->graph().initializers) {
    const std::string& name = (*model)->graph().values[index].name;
    if (checkpoint.parameters.count(name) == 0) continue;
    ++found;
    EXPECT_EQ(Values(tensor), Values(checkpoint.parameters.at(name))) << name;
  }
  EXPECT_EQ(found, 2);

  // Only the initializers and the metadata changed.
  onnx::ModelProto original, written;
  ASSERT_TRUE(original.ParseFromString(source));
  ASSERT_TRUE(written.ParseFromString(ReadBytes(path)));
  EXPECT_EQ(written.graph().node_size(), original.graph().node_size());
  EXPECT_EQ(written.graph().initializer(2).SerializeAsString(),
            original.graph().initializer(2).SerializeAsString());

  // A checkpoint used as the source of the next one keeps a single "replicad.step".
  checkpoint.step = 8;
  ASSERT_TRUE(WriteCheckpoint(ReadBytes(path), path, checkpoint).ok());
  ASSERT_TRUE(written.ParseFromString(ReadBytes(path)));
  int steps = 0;
  for (const auto& entry : written.metadata_props()) {
    if (entry.key() == "replicad.step") {
      ++steps;
      EXPECT_EQ(entry.value(), "8");
    }
  }
  EXPECT_EQ(steps, 1);
  EXPECT_TRUE(ReadCheckpoint(path)->state_matches);
}

TEST_F(CheckpointTest, AModelWithoutStepReadsAsParametersOnly) {
  const std::string dir = MakeTempDir("plain");
  WriteBytes(dir + "/m.onnx", GemmModel(3, 4));
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(dir + "/m.onnx");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->has_step);
  EXPECT_FALSE(loaded->state_matches);
  EXPECT_EQ(loaded->checkpoint.parameters.size(), 2u);
}

TEST_F(CheckpointTest, BadParametersAreNamedAndWriteNothing) {
  const std::string dir = MakeTempDir("bad_parameters");
  const std::string path = dir + "/m.onnx";
  const std::string source = GemmModel(3, 4);

  Checkpoint unknown = SmallCheckpoint(1);
  unknown.parameters["C"] = Filled({4}, [](int64_t) { return 0.0f; });
  absl::Status status = WriteCheckpoint(source, path, unknown);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(path), HasSubstr("parameter 'C' is not an initializer")));

  Checkpoint shape = SmallCheckpoint(1);
  shape.parameters["W"] = Filled({3, 4}, [](int64_t) { return 0.0f; });
  status = WriteCheckpoint(source, path, shape);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("parameter 'W' must be float32[4,3]"),
                                      HasSubstr("received float32[3,4]")));

  Checkpoint dtype = SmallCheckpoint(1);
  dtype.parameters["B"] = Tensor::Host(DType::kInt64, {4});
  status = WriteCheckpoint(source, path, dtype);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("parameter 'B' must be float32[4]"), HasSubstr("received int64[4]")));

  Checkpoint negative = SmallCheckpoint(-1);
  EXPECT_EQ(WriteCheckpoint(source, path, negative).code(), absl::StatusCode::kInvalidArgument);
  Checkpoint config = SmallCheckpoint(1);
  config.optimizer.learning_rate = -1;
  EXPECT_THAT(WriteCheckpoint(source, path, config).message(),
              HasSubstr("optimizer.learning_rate"));
  EXPECT_EQ(WriteCheckpoint("not a model", path, SmallCheckpoint(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST_F(CheckpointTest, UnwritableDirectoriesNameThePathAndTheCall) {
  const std::string dir = MakeTempDir("unwritable");
  const std::string source = GemmModel(3, 4);

  absl::Status status = WriteCheckpoint(source, dir + "/missing/m.onnx", SmallCheckpoint(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), absl::StrCat("directory '", dir, "/missing' does not exist"));

  // A regular file where a directory should be: refused even for root.
  WriteBytes(dir + "/file", "x");
  status = WriteCheckpoint(source, dir + "/file/m.onnx", SmallCheckpoint(1));
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), absl::StrCat("'", dir, "/file' is not a directory"));

  if (::geteuid() != 0) {  // Root ignores permission bits.
    const std::string locked = dir + "/locked";
    ASSERT_EQ(::mkdir(locked.c_str(), 0555), 0);
    status = WriteCheckpoint(source, locked + "/m.onnx", SmallCheckpoint(1));
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(status.message(),
                HasSubstr("open " + locked + "/" + CheckpointTemporaryName("m.onnx.state")));
  }
}

// Runs WriteCheckpoint in a child whose file size limit is `limit` bytes, so a write() fails
// with EFBIG part-way; returns the status message.
std::string WriteWithFileSizeLimit(const std::string& source, const std::string& path,
                                   const Checkpoint& checkpoint, rlim_t limit) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    const std::string message(WriteCheckpoint(source, path, checkpoint).message());
    if (::write(fds[1], message.data(), message.size()) < 0) ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[512];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0) message.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return message;
}

TEST_F(CheckpointTest, AFailedWriteLeavesThePreviousCheckpointAndNoTemporaryFile) {
  const std::string dir = MakeTempDir("failed_write");
  const std::string path = dir + "/m.onnx";
  const std::string source = GemmModel(64, 64);  // ONNX file larger than the state file.
  Checkpoint first;
  first.step = 1;
  first.parameters["W"] = Filled({64, 64}, [](int64_t i) { return 1.0f * i; });
  ASSERT_TRUE(WriteCheckpoint(source, path, first).ok());
  const off_t state_size = ReadBytes(path + ".state").size();
  ASSERT_LT(state_size, static_cast<off_t>(ReadBytes(path).size()));

  Checkpoint second = first;
  second.step = 2;
  second.parameters["W"] = Filled({64, 64}, [](int64_t i) { return -1.0f * i; });
  // The state file fails: nothing changes.
  EXPECT_EQ(WriteWithFileSizeLimit(source, path, second, 16),
            absl::StrCat("write ", dir, "/", CheckpointTemporaryName("m.onnx.state"),
                         ": File too large"));
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{"m.onnx", "m.onnx.state"}));
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->checkpoint.step, 1);
  EXPECT_TRUE(loaded->state_matches);

  // The state file's temporary is whole, then the ONNX file's fails: neither is renamed
  // into place, so the old checkpoint stays whole, its state included (state ids are
  // fixed-length, so the new state file has the old one's size).
  EXPECT_EQ(
      WriteWithFileSizeLimit(source, path, second, state_size + 8),
      absl::StrCat("write ", dir, "/", CheckpointTemporaryName("m.onnx"), ": File too large"));
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{"m.onnx", "m.onnx.state"}));
  loaded = ReadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->checkpoint.step, 1);
  EXPECT_TRUE(loaded->state_matches);
  EXPECT_EQ(Values(loaded->checkpoint.parameters.at("W")), Values(first.parameters["W"]));
}

TEST_F(CheckpointTest, AStateFileOfAnotherWriteIsIgnored) {
  const std::string dir = MakeTempDir("stale_state");
  const std::string source = GemmModel(3, 4);
  ASSERT_TRUE(WriteCheckpoint(source, dir + "/a.onnx", SmallCheckpoint(8)).ok());
  ASSERT_TRUE(WriteCheckpoint(source, dir + "/b.onnx", SmallCheckpoint(7)).ok());
  ASSERT_TRUE(WriteCheckpoint(source, dir + "/c.onnx", SmallCheckpoint(7)).ok());
  const std::string b_state = ReadBytes(dir + "/b.onnx.state");

  // Another step, as a crash between the two renames leaves it.
  WriteBytes(dir + "/b.onnx.state", ReadBytes(dir + "/a.onnx.state"));
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(dir + "/b.onnx");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->has_step);
  EXPECT_EQ(loaded->checkpoint.step, 7);
  EXPECT_FALSE(loaded->state_matches);
  EXPECT_TRUE(loaded->checkpoint.optimizer_state.empty());
  EXPECT_EQ(Values(loaded->checkpoint.parameters.at("W")),
            Values(SmallCheckpoint(7).parameters["W"]));

  // The same step from another write is told apart by the checkpoint id.
  WriteBytes(dir + "/b.onnx.state", ReadBytes(dir + "/c.onnx.state"));
  EXPECT_FALSE(ReadCheckpoint(dir + "/b.onnx")->state_matches);

  WriteBytes(dir + "/b.onnx.state", b_state);
  EXPECT_TRUE(ReadCheckpoint(dir + "/b.onnx")->state_matches);

  ASSERT_EQ(::unlink((dir + "/b.onnx.state").c_str()), 0);
  loaded = ReadCheckpoint(dir + "/b.onnx");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->state_matches);
  EXPECT_EQ(loaded->checkpoint.step, 7);
}

TEST_F(CheckpointTest, ReadErrorsNameThePath) {
  const std::string dir = MakeTempDir("read_errors");
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(dir + "/none.onnx");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr(dir + "/none.onnx"));

  WriteBytes(dir + "/junk.onnx", "\xff\xff not a protobuf");
  loaded = ReadCheckpoint(dir + "/junk.onnx");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr(dir + "/junk.onnx"));

  ASSERT_TRUE(WriteCheckpoint(GemmModel(3, 4), dir + "/m.onnx", SmallCheckpoint(3)).ok());
  WriteBytes(dir + "/m.onnx.state", "\xff\xff not a protobuf");
  loaded = ReadCheckpoint(dir + "/m.onnx");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr(dir + "/m.onnx.state"));

  // An ONNX model that is not a state file.
  WriteBytes(dir + "/m.onnx.state", GemmModel(3, 4));
  loaded = ReadCheckpoint(dir + "/m.onnx");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr(dir + "/m.onnx.state"), HasSubstr("replicad.format")));
}

// A symbolic link planted at the temporary name is replaced, never written
// through; a directory at the target fails before anything is written.
TEST_F(CheckpointTest, PlantedLinksAreNotFollowedAndFailuresLeaveNothing) {
  const std::string dir = MakeTempDir("planted");
  const std::string victim = dir + "/victim.txt";
  WriteBytes(victim, "precious");
  const std::string path = dir + "/m.onnx";
  ASSERT_EQ(::symlink(victim.c_str(), (dir + "/" + CheckpointTemporaryName("m.onnx")).c_str()), 0);
  ASSERT_EQ(
      ::symlink(victim.c_str(), (dir + "/" + CheckpointTemporaryName("m.onnx.state")).c_str()), 0);
  ASSERT_TRUE(WriteCheckpoint(GemmModel(3, 4), path, SmallCheckpoint(1)).ok());
  EXPECT_EQ(ReadBytes(victim), "precious");
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{"m.onnx", "m.onnx.state", "victim.txt"}));

  ASSERT_EQ(::mkdir((dir + "/sub").c_str(), 0755), 0);
  absl::Status status = WriteCheckpoint(GemmModel(3, 4), dir + "/sub", SmallCheckpoint(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("exists and is not a regular file"));
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{"m.onnx", "m.onnx.state", "sub", "victim.txt"}));
}

TEST_F(CheckpointTest, TemporaryFilesAreNamedByTheTargetAndNeverRead) {
  const std::string dir = MakeTempDir("temporaries");
  const std::string path = dir + "/m.onnx";
  const std::string source = GemmModel(3, 4);
  ASSERT_TRUE(WriteCheckpoint(source, path, SmallCheckpoint(4)).ok());
  // What a crash mid-write leaves: torn temporaries beside whole targets.
  WriteBytes(dir + "/" + CheckpointTemporaryName("m.onnx"), source.substr(0, source.size() / 2));
  WriteBytes(dir + "/" + CheckpointTemporaryName("m.onnx.state"), "torn");
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->checkpoint.step, 4);
  EXPECT_TRUE(loaded->state_matches);
  // The next write reuses and consumes them.
  ASSERT_TRUE(WriteCheckpoint(source, path, SmallCheckpoint(5)).ok());
  EXPECT_EQ(ListDir(dir), (std::set<std::string>{"m.onnx", "m.onnx.state"}));
  EXPECT_EQ(ReadCheckpoint(path)->checkpoint.step, 5);
}

// The writes go through the directory's descriptor: renaming the directory
// (or planting a link at its old path) after it was opened cannot move them.
TEST_F(CheckpointTest, WritesFollowTheOpenDirectoryNotItsPath) {
  const std::string dir = MakeTempDir("descriptor");
  ASSERT_EQ(::mkdir((dir + "/a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir + "/elsewhere").c_str(), 0755), 0);
  absl::StatusOr<CheckpointDirectory> opened = CheckpointDirectory::Open(dir + "/a");
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_EQ(::rename((dir + "/a").c_str(), (dir + "/moved").c_str()), 0);
  ASSERT_EQ(::symlink((dir + "/elsewhere").c_str(), (dir + "/a").c_str()), 0);
  Checkpoint checkpoint = SmallCheckpoint(2);
  checkpoint.run_id = "run-7";
  ASSERT_TRUE(WriteCheckpoint(GemmModel(3, 4), *opened, "m.onnx", checkpoint).ok());
  EXPECT_TRUE(ListDir(dir + "/elsewhere").empty());
  EXPECT_EQ(ListDir(dir + "/moved"), (std::set<std::string>{"m.onnx", "m.onnx.state"}));
  absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(dir + "/moved/m.onnx");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->checkpoint.run_id, "run-7");
  EXPECT_TRUE(loaded->state_matches);
  // Not a plain name: refused before anything is written.
  for (const std::string& name : {std::string(""), std::string(".."), std::string("x/y.onnx")}) {
    EXPECT_EQ(WriteCheckpoint(GemmModel(3, 4), *opened, name, checkpoint).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

// A run id is read from the file's top-level fields, past a graph that is
// never parsed; a file without one reads "", and a file that is not ONNX is
// InvalidArgument naming it.
TEST_F(CheckpointTest, TheRunIdIsReadWithoutParsingTheGraph) {
  const std::string dir = MakeTempDir("run_id");
  absl::StatusOr<CheckpointDirectory> opened = CheckpointDirectory::Open(dir);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Checkpoint checkpoint;
  checkpoint.step = 3;
  checkpoint.run_id = "0123456789abcdef";
  checkpoint.parameters["W"] = Filled({512, 512}, [](int64_t i) { return 0.5f * i; });
  ASSERT_TRUE(WriteCheckpoint(GemmModel(512, 512), *opened, "big.onnx", checkpoint).ok());
  EXPECT_EQ(*ReadCheckpointRunId(*opened, "big.onnx"), "0123456789abcdef");
  WriteBytes(dir + "/plain.onnx", GemmModel(3, 4));
  EXPECT_EQ(*ReadCheckpointRunId(*opened, "plain.onnx"), "");
  // A graph whose contents are not an ONNX graph is skipped all the same.
  onnx::ModelProto odd;
  odd.ParseFromString(GemmModel(3, 4));
  odd.mutable_graph()->mutable_node(0)->set_op_type(std::string(1000, '\xff'));
  onnx::StringStringEntryProto* entry = odd.add_metadata_props();
  entry->set_key("replicad.run_id");
  entry->set_value("odd");
  WriteBytes(dir + "/odd.onnx", odd.SerializeAsString());
  EXPECT_EQ(*ReadCheckpointRunId(*opened, "odd.onnx"), "odd");
  WriteBytes(dir + "/junk.onnx", "\xff\xff\xff not a protobuf");
  absl::StatusOr<std::string> junk = ReadCheckpointRunId(*opened, "junk.onnx");
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(junk.status().message(), HasSubstr(dir + "/junk.onnx"));
  EXPECT_TRUE(absl::IsNotFound(ReadCheckpointRunId(*opened, "absent.onnx").status()));
}

// Every name the file system takes (255 bytes) can be a checkpoint: the
// state file of a name too long for ".state" takes the hash form, two long
// names sharing a prefix keep apart, and the temporary files are short.
TEST_F(CheckpointTest, LongNamesHaveStateFilesOfTheirOwn) {
  const std::string dir = MakeTempDir("long_names");
  const std::string a = std::string(250, 'a') + ".onnx", b = std::string(250, 'a') + ".onnb";
  EXPECT_EQ(CheckpointStateName("m.onnx"), "m.onnx.state");
  EXPECT_EQ(CheckpointStateName(std::string(249, 'x')), std::string(249, 'x') + ".state");
  EXPECT_EQ(CheckpointStateName(a).size(), 255u);
  EXPECT_NE(CheckpointStateName(a), CheckpointStateName(b));
  EXPECT_EQ(CheckpointStatePath("/r/" + a), "/r/" + CheckpointStateName(a));
  ASSERT_TRUE(WriteCheckpoint(GemmModel(3, 4), dir + "/" + a, SmallCheckpoint(1)).ok());
  ASSERT_TRUE(WriteCheckpoint(GemmModel(3, 4), dir + "/" + b, SmallCheckpoint(2)).ok());
  EXPECT_EQ(ListDir(dir),
            (std::set<std::string>{a, b, CheckpointStateName(a), CheckpointStateName(b)}));
  EXPECT_TRUE(ReadCheckpoint(dir + "/" + a)->state_matches);
  EXPECT_EQ(ReadCheckpoint(dir + "/" + b)->checkpoint.step, 2);
  absl::Status too_long =
      WriteCheckpoint(GemmModel(3, 4), dir + "/" + std::string(256, 'c'), SmallCheckpoint(1));
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("at most 255 bytes; received 256"));
}

// ~4 MB of parameters and as much state; every value derives from the step so a reader can
// tell a whole checkpoint from a torn or mixed one. Exact in float32 for steps < 2048.
constexpr int64_t kCrashDim = 1000;

Checkpoint CrashCheckpoint(int64_t step) {
  Checkpoint c;
  c.step = step;
  const float s = static_cast<float>(step);
  c.parameters["W"] =
      Filled({kCrashDim, kCrashDim}, [s](int64_t i) { return s + (i % 4096) / 4096.0f; });
  c.parameters["B"] = Filled({kCrashDim}, [s](int64_t i) { return -s - i / 1024.0f; });
  c.optimizer = SgdMomentum();
  c.optimizer_state = {
      {"param0.momentum_buffer",
       Filled({kCrashDim * kCrashDim}, [s](int64_t i) { return 2 * s + (i % 1024) / 1024.0f; })},
      {"param1.momentum_buffer", Filled({kCrashDim}, [s](int64_t i) { return 3 * s - i; })}};
  return c;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Kills a writer child again and again; after every kill the files must read back as one
// whole checkpoint. The kill moments come in three kinds, in turn: a random delay spread
// over about two writes (measured first, so it suits any disk's fsync latency), which lands
// anywhere, including while the child builds its values; and, so that the rare short windows
// are surely hit, within a millisecond of the state file's or the ONNX file's temporary
// appearing (mid-write, and between the two renames).
TEST_F(CheckpointTest, SigkillAtAnyMomentLeavesAWholeCheckpoint) {
  constexpr int kKills = 24;
  const std::string dir = MakeTempDir("crash");
  const std::string path = dir + "/m.onnx";
  const std::string source = GemmModel(kCrashDim, kCrashDim);
  double cycle_ms = 0;  // One writer iteration: make the values, write both files.
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(WriteCheckpoint(source, path, CrashCheckpoint(0)).ok());
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    cycle_ms = std::max(cycle_ms, took.count());
  }

  const std::string onnx_temporary = CheckpointTemporaryName("m.onnx");
  const std::string state_temporary = CheckpointTemporaryName("m.onnx.state");
  const std::set<std::string> allowed = {"m.onnx", "m.onnx.state", onnx_temporary, state_temporary};
  const std::string temporaries[] = {dir + "/" + state_temporary, dir + "/" + onnx_temporary};
  std::mt19937 random(20240607);
  std::uniform_int_distribution<int> delay_ms(1, 30 + static_cast<int>(2 * cycle_ms));
  std::uniform_int_distribution<int> after_temporary_us(0, 1000);
  int64_t last_step = 0;
  int with_temporaries = 0, stale_states = 0;
  for (int k = 0; k < kKills; ++k) {
    const int mode = k % 3;  // 0: random delay; 1, 2: after temporaries[mode - 1] appears.
    // A temporary left by the previous kill would trigger at once; the writer's reuse of such
    // files is left to the random kills and to TemporaryFilesAreNamedByTheTargetAndNeverRead.
    if (mode != 0) {
      for (const std::string& temporary : temporaries) ::unlink(temporary.c_str());
    }
    const int64_t first_step = last_step + 1;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      for (int64_t step = first_step;; ++step) {
        if (!WriteCheckpoint(source, path, CrashCheckpoint(step)).ok()) ::_exit(2);
      }
    }
    if (mode == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
    } else {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!Exists(temporaries[mode - 1]) && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(after_temporary_us(random)));
    }
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the writer failed before the kill (exit " << WEXITSTATUS(status) << ")";

    const std::set<std::string> names = ListDir(dir);
    for (const std::string& name : names) EXPECT_EQ(allowed.count(name), 1u) << name;
    with_temporaries += names.count(onnx_temporary) + names.count(state_temporary) > 0;

    absl::StatusOr<LoadedCheckpoint> loaded = ReadCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << "after kill " << k << ": " << loaded.status();
    ASSERT_TRUE(loaded->has_step);
    const int64_t step = loaded->checkpoint.step;
    ASSERT_GE(step, last_step) << "after kill " << k;
    const Checkpoint expected = CrashCheckpoint(step);
    ASSERT_EQ(loaded->checkpoint.parameters.size(), 2u);
    for (const auto& [name, tensor] : expected.parameters) {
      ASSERT_TRUE(SameTensor(loaded->checkpoint.parameters.at(name), tensor))
          << name << " after kill " << k << " at step " << step;
    }
    if (loaded->state_matches) {
      ExpectSameConfig(loaded->checkpoint.optimizer, expected.optimizer);
      ASSERT_EQ(loaded->checkpoint.optimizer_state.size(), 2u);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(loaded->checkpoint.optimizer_state[i].first, expected.optimizer_state[i].first);
        ASSERT_TRUE(SameTensor(loaded->checkpoint.optimizer_state[i].second,
                               expected.optimizer_state[i].second))
            << expected.optimizer_state[i].first << " after kill " << k << " at step " << step;
      }
    } else {
      ++stale_states;
      EXPECT_TRUE(loaded->checkpoint.optimizer_state.empty());
    }
    last_step = step;
  }
  std::cout << kKills << " kills (one write: " << cycle_ms << " ms): reached step " << last_step
            << "; temporaries left by " << with_temporaries
            << " kills; state file of another write after " << stale_states << "\n";
  // The kills must have hit finished and unfinished writes, or the test proved nothing.
  EXPECT_GE(last_step, 1);
  EXPECT_GE(with_temporaries, 1);
}

}  // namespace
}  // namespace replicad
