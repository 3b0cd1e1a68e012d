#include "client/npy.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad::client {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr char kPython[] = "/usr/bin/python3";

// A fresh directory per test, removed afterwards.
class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("replicad_npy_", info->name(), "_", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteFile(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }

  std::string ReadFile(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  static bool HaveNumPy() {
    return access(kPython, X_OK) == 0 &&
           std::system(absl::StrCat(kPython, " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0;
  }

  // Runs `script` with the test directory as the working directory; returns
  // its stdout and stderr, and fails the test on a non-zero exit.
  std::string RunPython(const std::string& script) const {
    WriteFile("script.py", script);
    std::string command =
        absl::StrCat("cd '", dir_.string(), "' && ", kPython, " script.py > output.txt 2>&1");
    int rc = std::system(command.c_str());
    std::string output = ReadFile("output.txt");
    EXPECT_EQ(rc, 0) << output;
    return output;
  }

  std::filesystem::path dir_;
};

v1::Tensor Float32(std::vector<int64_t> shape, const std::vector<float>& values) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_raw(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return t;
}

v1::Tensor Int64(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_INT64);
  for (int64_t d : shape) t.add_shape(d);
  t.set_raw(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8));
  return t;
}

template <typename T>
std::vector<T> Values(const v1::Tensor& t) {
  std::vector<T> values(t.raw().size() / sizeof(T));
  // An empty vector's data() may be null, and memcpy from or to null is undefined even for
  // zero bytes (UBSan reports it).
  if (!values.empty()) std::memcpy(values.data(), t.raw().data(), values.size() * sizeof(T));
  return values;
}

std::vector<int64_t> Shape(const v1::Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// A version 1.0 file with `header` (padded as NumPy pads it) followed by `data`.
std::string MakeNpy(const std::string& header, const std::string& data, char major = 1) {
  size_t preamble = major == 1 ? 10 : 12;
  std::string text = header;
  while ((preamble + text.size() + 1) % 64 != 0) text += ' ';
  text += '\n';
  std::string out = std::string("\x93NUMPY", 6) + major + '\0';
  for (size_t i = 0; i < preamble - 8; ++i)
    out += static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text + data;
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

TEST_F(NpyTest, RoundTripsFloat32AndInt64Shapes) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  std::vector<v1::Tensor> tensors = {
      Float32({2, 3}, {-1.5f, 0.0f, -0.0f, kInf, kNan, 3.25e-38f}),
      Float32({}, {42.5f}),
      Float32({0}, {}),
      Float32({3, 0, 2}, {}),
      Float32({1}, {7.0f}),
      Int64({4}, {std::numeric_limits<int64_t>::min(), -1, 0, std::numeric_limits<int64_t>::max()}),
      Int64({}, {-123456789012345}),
      Int64({2, 0}, {}),
      Int64({1, 1, 1, 1, 2}, {5, 6}),
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(
        absl::StrCat("tensor ", i, " shape (", absl::StrJoin(Shape(tensors[i]), ","), ")"));
    std::string path = Path(absl::StrCat("t", i, ".npy"));
    ASSERT_TRUE(WriteNpy(path, tensors[i]).ok());
    absl::StatusOr<v1::Tensor> back = ReadNpy(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), tensors[i].dtype());
    EXPECT_EQ(Shape(*back), Shape(tensors[i]));
    EXPECT_EQ(back->raw(), tensors[i].raw());  // Bitwise: NaN and -0.0 survive.

    absl::StatusOr<std::string> bytes = EncodeNpy(tensors[i]);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, ReadFile(absl::StrCat("t", i, ".npy")));
    EXPECT_EQ(bytes->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ((bytes->size() - tensors[i].raw().size()) % 64, 0u);
    absl::StatusOr<v1::Tensor> decoded = DecodeNpy(*bytes, "memory");
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->raw(), tensors[i].raw());
  }
}

TEST_F(NpyTest, WritesVersion2WhenTheHeaderOutgrowsVersion1) {
  // Only a shape of tens of thousands of dims makes the header exceed 65535
  // bytes; with one zero dim the data stays empty.
  std::vector<int64_t> shape(30000, 1);
  shape[17] = 0;
  v1::Tensor tensor = Float32(shape, {});
  absl::StatusOr<std::string> bytes = EncodeNpy(tensor);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  EXPECT_EQ(bytes->size() % 64, 0u);
  absl::StatusOr<v1::Tensor> back = DecodeNpy(*bytes, "memory");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Shape(*back), shape);
}

TEST_F(NpyTest, ReadsFilesWrittenByNumPy) {
  if (!HaveNumPy()) GTEST_SKIP() << kPython << " with numpy is not available";
  RunPython(R"(
import numpy as np
from numpy.lib import format as fmt
np.save('f32.npy', (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5) * 1.25)
np.save('i64.npy', np.array([[-(2**63), 2**63 - 1], [0, -7]], dtype=np.int64))
np.save('scalar_f32.npy', np.float32(3.5))
np.save('scalar_i64.npy', np.array(-9, dtype=np.int64))
np.save('empty.npy', np.zeros((4, 0, 3), dtype=np.float32))
np.save('one_dim.npy', np.array([1.0, -2.0, 1e30], dtype=np.float32))
np.save('sliced.npy', np.arange(12, dtype=np.int64).reshape(3, 4)[:, 1::2])
for major in (1, 2, 3):
    with open('v%d.npy' % major, 'wb') as f:
        fmt.write_array(f, np.array([[1.5, 2.5]], dtype=np.float32), version=(major, 0))
)");
  struct Case {
    std::string file;
    v1::DataType dtype;
    std::vector<int64_t> shape;
    std::vector<float> floats;
    std::vector<int64_t> ints;
  };
  std::vector<Case> cases = {
      {"f32.npy",
       v1::DATA_TYPE_FLOAT32,
       {2, 3},
       {-3.125f, -1.875f, -0.625f, 0.625f, 1.875f, 3.125f},
       {}},
      {"i64.npy",
       v1::DATA_TYPE_INT64,
       {2, 2},
       {},
       {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0, -7}},
      {"scalar_f32.npy", v1::DATA_TYPE_FLOAT32, {}, {3.5f}, {}},
      {"scalar_i64.npy", v1::DATA_TYPE_INT64, {}, {}, {-9}},
      {"empty.npy", v1::DATA_TYPE_FLOAT32, {4, 0, 3}, {}, {}},
      {"one_dim.npy", v1::DATA_TYPE_FLOAT32, {3}, {1.0f, -2.0f, 1e30f}, {}},
      {"sliced.npy", v1::DATA_TYPE_INT64, {3, 2}, {}, {1, 3, 5, 7, 9, 11}},
      {"v1.npy", v1::DATA_TYPE_FLOAT32, {1, 2}, {1.5f, 2.5f}, {}},
      {"v2.npy", v1::DATA_TYPE_FLOAT32, {1, 2}, {1.5f, 2.5f}, {}},
      {"v3.npy", v1::DATA_TYPE_FLOAT32, {1, 2}, {1.5f, 2.5f}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    absl::StatusOr<v1::Tensor> t = ReadNpy(Path(c.file));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), c.dtype);
    EXPECT_EQ(Shape(*t), c.shape);
    if (c.dtype == v1::DATA_TYPE_FLOAT32) {
      EXPECT_THAT(Values<float>(*t), ElementsAreArray(c.floats));
    } else {
      EXPECT_THAT(Values<int64_t>(*t), ElementsAreArray(c.ints));
    }
  }
  EXPECT_EQ(ReadFile("v2.npy")[6], 2);
  EXPECT_EQ(ReadFile("v3.npy")[6], 3);
}

// The narrow integer, bool and float16 arrays a model may take (token ids as int32, masks as
// bool, a float16 model's images):
// numpy's files read with their dtype and bytes, and written back byte for byte.
TEST_F(NpyTest, ReadsAndWritesNumPysNarrowIntegersAndBools) {
  if (!HaveNumPy()) GTEST_SKIP() << kPython << " with numpy is not available";
  RunPython(R"(
import numpy as np
np.save('i32.npy', np.array([[-(2**31), 2**31 - 1], [0, -7]], dtype=np.int32))
np.save('i8.npy', np.array([-128, 127, 0], dtype=np.int8))
np.save('u8.npy', np.array([0, 255, 7], dtype=np.uint8))
np.save('b1.npy', np.array([[True, False, True]]))
np.save('f2.npy', np.array([1.0, -2.0, 65504.0], dtype=np.float16))
)");
  struct Case {
    std::string file;
    v1::DataType dtype;
    std::vector<int64_t> shape;
    std::string raw;
  };
  const int32_t i32[] = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
                         0, -7};
  const std::vector<Case> cases = {
      {"i32.npy", v1::DATA_TYPE_INT32, {2, 2}, std::string(reinterpret_cast<const char*>(i32), 16)},
      {"i8.npy", v1::DATA_TYPE_INT8, {3}, std::string("\x80\x7f\x00", 3)},
      {"u8.npy", v1::DATA_TYPE_UINT8, {3}, std::string("\x00\xff\x07", 3)},
      {"b1.npy", v1::DATA_TYPE_BOOL, {1, 3}, std::string("\x01\x00\x01", 3)},
      // float16 1.0, -2.0 and 65504 (0x3c00, 0xc000, 0x7bff), little-endian.
      {"f2.npy", v1::DATA_TYPE_FLOAT16, {3}, std::string("\x00\x3c\x00\xc0\xff\x7b", 6)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    absl::StatusOr<v1::Tensor> t = ReadNpy(Path(c.file));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), c.dtype);
    EXPECT_EQ(Shape(*t), c.shape);
    EXPECT_EQ(t->raw(), c.raw);
    ASSERT_TRUE(WriteNpy(Path("again_" + c.file), *t).ok());
    EXPECT_EQ(ReadFile("again_" + c.file), ReadFile(c.file)) << "the bytes numpy wrote";
  }
}

TEST_F(NpyTest, NumPyReadsOurFiles) {
  if (!HaveNumPy()) GTEST_SKIP() << kPython << " with numpy is not available";
  std::vector<float> big(100003);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.37f - 1000.0f;
  struct Case {
    std::string file;
    v1::Tensor tensor;
  };
  std::vector<Case> cases = {
      {"big.npy", Float32({100003}, big)},
      {"matrix.npy", Float32({2, 2}, {0.5f, -0.25f, 1e-3f, 7.0f})},
      {"ints.npy", Int64({3, 1}, {std::numeric_limits<int64_t>::min(), 5, -6})},
      {"scalar.npy", Float32({}, {-2.5f})},
      {"empty.npy", Int64({0, 5}, {})},
  };
  std::string expected;
  for (const Case& c : cases) {
    ASSERT_TRUE(WriteNpy(Path(c.file), c.tensor).ok());
    // The checksum NumPy prints below: the sum of the data as little-endian
    // unsigned 32-bit words, modulo 2^64. Exact for any bit pattern.
    uint64_t checksum = 0;
    for (size_t i = 0; i < c.tensor.raw().size(); i += 4) {
      uint32_t word;
      std::memcpy(&word, c.tensor.raw().data() + i, 4);
      checksum += word;
    }
    std::string shape = absl::StrJoin(c.tensor.shape(), ",");
    absl::StrAppend(&expected, c.file, " ",
                    c.tensor.dtype() == v1::DATA_TYPE_FLOAT32 ? "<f4" : "<i8", " (", shape, ") C ",
                    checksum, "\n");
  }
  std::string output = RunPython(R"(
import numpy as np
for name in ['big.npy', 'matrix.npy', 'ints.npy', 'scalar.npy', 'empty.npy']:
    a = np.load(name, allow_pickle=False)
    words = np.frombuffer(a.tobytes(), dtype='<u4').astype(np.uint64)
    print(name, a.dtype.str, '(' + ','.join(str(d) for d in a.shape) + ')',
          'C' if a.flags['C_CONTIGUOUS'] else 'F', int(words.sum(dtype=np.uint64)))
)");
  EXPECT_EQ(output, expected);
}

TEST_F(NpyTest, MissingFileIsNotFound) {
  absl::StatusOr<v1::Tensor> t = ReadNpy(Path("absent.npy"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(Path("absent.npy")));
}

// Each case: the file's bytes, then what the message must contain besides the
// file name.
TEST_F(NpyTest, RejectsBadFilesNamingExpectedAndReceived) {
  struct Case {
    std::string file;
    std::string bytes;
    std::vector<std::string> message;
  };
  std::string f32x6 = FloatBytes({1, 2, 3, 4, 5, 6});
  std::string ok_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string kExpected =
      "expected <f4 (float32), <f2 (float16), <i8 (int64), <i4 (int32), |i1 (int8), |u1 (uint8) or "
      "|b1 (bool)";
  std::vector<Case> cases = {
      {"zip.npy",
       std::string("PK\x03\x04rest of a zip file", 22),
       {"bad magic", "expected \\x93NUMPY", "got \"PK\\x03\\x04re\""}},
      {"empty.npy", "", {"bad magic", "expected \\x93NUMPY", "got \"\""}},
      {"fortran.npy",
       MakeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", f32x6),
       {"fortran_order is True", "expected False (C order)"}},
      {"f64.npy",
       MakeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", f32x6),
       {"unsupported descr '<f8'", kExpected}},
      {"big_endian.npy",
       MakeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", f32x6),
       {"unsupported descr '>f4'", kExpected}},
      {"uint32.npy",
       MakeNpy("{'descr': '<u4', 'fortran_order': False, 'shape': (6,), }", f32x6),
       {"unsupported descr '<u4'", kExpected}},
      {"record.npy",
       MakeNpy("{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (3,), }",
               f32x6),
       {"unsupported descr [('a', '<f4'), ('b', '<f4')]", kExpected}},
      {"truncated.npy",
       MakeNpy(ok_header, f32x6.substr(0, 20)),
       {"truncated data", "expected 24 bytes, got 20"}},
      {"trailing.npy",
       MakeNpy(ok_header, f32x6 + "xx"),
       {"trailing data", "expected 24 bytes, got 26"}},
      {"version.npy",
       MakeNpy(ok_header, f32x6, 4),
       {"unsupported format version 4.0", "expected 1.0, 2.0 or 3.0"}},
      {"short_header.npy",
       MakeNpy(ok_header, "").substr(0, 40),
       {"truncated header", "expected 118 bytes, got 30"}},
      {"negative.npy",
       MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", ""),
       {"bad shape (2, -3)", "expected non-negative integers, got '-3'"}},
      {"no_shape.npy",
       MakeNpy("{'descr': '<f4', 'fortran_order': False}", ""),
       {"malformed header", "expected keys 'descr', 'fortran_order' and 'shape'"}},
      {"extra_key.npy",
       MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", f32x6.substr(0, 4)),
       {"unexpected key 'x'"}},
      {"not_a_dict.npy", MakeNpy("descr='<f4'", ""), {"malformed header", "expected '{'"}},
      {"overflow.npy",
       MakeNpy("{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""),
       {"shape (4294967296, 4294967296) is too large"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    WriteFile(c.file, c.bytes);
    absl::StatusOr<v1::Tensor> t = ReadNpy(Path(c.file));
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(Path(c.file) + ": "));
    for (const std::string& part : c.message)
      EXPECT_THAT(std::string(t.status().message()), HasSubstr(part));
  }
}

TEST_F(NpyTest, RejectsFortranOrderFromNumPy) {
  if (!HaveNumPy()) GTEST_SKIP() << kPython << " with numpy is not available";
  RunPython("import numpy as np\nnp.save('f.npy', np.asfortranarray(np.ones((2, 3), 'f4')))\n");
  absl::StatusOr<v1::Tensor> t = ReadNpy(Path("f.npy"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              AllOf(HasSubstr(Path("f.npy")), HasSubstr("fortran_order is True")));
}

TEST_F(NpyTest, ReadsNativeAndNotApplicableByteOrderOnLittleEndianHosts) {
  if (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) GTEST_SKIP() << "big-endian host";
  absl::StatusOr<v1::Tensor> f = DecodeNpy(
      MakeNpy("{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }", FloatBytes({1, 2})),
      "f");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->dtype(), v1::DATA_TYPE_FLOAT32);
  EXPECT_THAT(Values<float>(*f), ElementsAreArray({1.0f, 2.0f}));
  std::string eight(8, '\0');
  eight[0] = 9;
  absl::StatusOr<v1::Tensor> i = DecodeNpy(
      MakeNpy("{\"shape\": (1L,), \"fortran_order\": False, \"descr\": \"|i8\"}", eight), "i");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->dtype(), v1::DATA_TYPE_INT64);
  EXPECT_THAT(Values<int64_t>(*i), ElementsAreArray({int64_t{9}}));
}

TEST_F(NpyTest, RejectsTensorsThatCannotBeSaved) {
  v1::Tensor unspecified = Float32({2}, {1, 2});
  unspecified.set_name("logits");
  unspecified.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  absl::Status s = WriteNpy(Path("u.npy"), unspecified);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("'logits'"), HasSubstr("DATA_TYPE_UNSPECIFIED"),
                    HasSubstr("expected DATA_TYPE_FLOAT32, INT64, INT32, INT8, UINT8 or BOOL")));
  EXPECT_FALSE(std::filesystem::exists(Path("u.npy")));

  v1::Tensor short_raw = Float32({2, 3}, {1, 2, 3, 4, 5});
  s = EncodeNpy(short_raw).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("shape (2, 3) needs 24 bytes of raw data, got 20"));

  v1::Tensor negative = Int64({-1}, {});
  s = EncodeNpy(negative).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shape (-1,) has a negative dim"));
}

TEST_F(NpyTest, WriteIntoMissingDirectoryIsNotFound) {
  absl::Status s = WriteNpy(Path("no/such/dir/x.npy"), Float32({}, {1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr(Path("no/such/dir/x.npy")));
}

}  // namespace
}  // namespace replicad::client
