#include "client/idx_dataset.h"

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad::client {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string Images(uint32_t count, uint32_t rows, uint32_t cols, const std::string& pixels,
                   uint32_t magic = 0x00000803) {
  return BigEndian(magic) + BigEndian(count) + BigEndian(rows) + BigEndian(cols) + pixels;
}

std::string Labels(uint32_t count, const std::string& labels, uint32_t magic = 0x00000801) {
  return BigEndian(magic) + BigEndian(count) + labels;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// Three 2x3 images (pixels 0, 255, 51, ...) labelled 0, 9, 3.
const std::string kPixels = std::string("\x00\xff\x33\x01\x02\x03", 6) +
                            std::string("\x10\x20\x30\x40\x50\x60", 6) +
                            std::string("\xfe\xfd\xfc\x00\x00\x80", 6);
const std::string kLabels = std::string("\x00\x09\x03", 3);

class IdxDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/idx_dataset_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

void ExpectTheThreeImages(const ImageDataset& d) {
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.rows, 2);
  EXPECT_EQ(d.cols, 3);
  ASSERT_EQ(d.images.size(), 18u);
  for (size_t i = 0; i < kPixels.size(); ++i) {
    EXPECT_EQ(d.images[i], static_cast<float>(static_cast<uint8_t>(kPixels[i])) / 255.0f) << i;
  }
  EXPECT_EQ(d.images[0], 0.0f);
  EXPECT_EQ(d.images[1], 1.0f);
  EXPECT_THAT(d.labels, ElementsAre(0, 9, 3));
}

TEST_F(IdxDatasetTest, ReadsGzippedFiles) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), Images(3, 2, 3, kPixels));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(3, kLabels));
  absl::StatusOr<ImageDataset> d = LoadIdxDataset(dir_, "train");
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectTheThreeImages(*d);
}

TEST_F(IdxDatasetTest, ReadsPlainFilesAndMixes) {
  WritePlain(Path("t10k-images-idx3-ubyte"), Images(3, 2, 3, kPixels));
  WriteGz(Path("t10k-labels-idx1-ubyte.gz"), Labels(3, kLabels));
  absl::StatusOr<ImageDataset> d = LoadIdxDataset(dir_, "t10k");
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectTheThreeImages(*d);
}

TEST_F(IdxDatasetTest, ReadsEmptySplit) {
  WritePlain(Path("t10k-images-idx3-ubyte"), Images(0, 28, 28, ""));
  WritePlain(Path("t10k-labels-idx1-ubyte"), Labels(0, ""));
  absl::StatusOr<ImageDataset> d = LoadIdxDataset(dir_, "t10k");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 0);
  EXPECT_EQ(d->rows, 28);
  EXPECT_TRUE(d->images.empty());
}

TEST_F(IdxDatasetTest, MissingFileIsNotFoundNamingThePaths) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), Images(3, 2, 3, kPixels));
  absl::Status s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(Path("train-labels-idx1-ubyte.gz")),
                                              HasSubstr(Path("train-labels-idx1-ubyte)"))));
  EXPECT_EQ(LoadIdxDataset(dir_ + "/nowhere", "train").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(IdxDatasetTest, BadMagicNamesExpectedAndReceived) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), Labels(3, kLabels));  // Labels where images go.
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(3, kLabels));
  absl::Status s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(Path("train-images-idx3-ubyte.gz")), HasSubstr("expected 0x00000803"),
                    HasSubstr("got 0x00000801")));

  WriteGz(Path("train-images-idx3-ubyte.gz"), Images(3, 2, 3, kPixels));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(3, kLabels, 0x00000803));
  s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(Path("train-labels-idx1-ubyte.gz")), HasSubstr("expected 0x00000801"),
                    HasSubstr("got 0x00000803")));
}

TEST_F(IdxDatasetTest, CountMismatchNamesBothFilesAndCounts) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), Images(3, 2, 3, kPixels));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(2, kLabels.substr(0, 2)));
  absl::Status s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(Path("train-images-idx3-ubyte.gz") + " holds 3 images"),
                    HasSubstr(Path("train-labels-idx1-ubyte.gz") + " holds 2 labels")));
}

TEST_F(IdxDatasetTest, TruncatedBodyAndHeader) {
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(3, kLabels));
  for (bool gz : {true, false}) {
    SCOPED_TRACE(gz);
    std::filesystem::remove(Path("train-images-idx3-ubyte.gz"));
    std::filesystem::remove(Path("train-images-idx3-ubyte"));
    const std::string name = gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte";
    const std::string body = Images(3, 2, 3, kPixels.substr(0, 10));
    if (gz) {
      WriteGz(Path(name), body);
    } else {
      WritePlain(Path(name), body);
    }
    absl::Status s = LoadIdxDataset(dir_, "train").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(Path(name)), HasSubstr("truncated"),
                                                HasSubstr("expected 18 bytes of pixels, got 10")));
  }
  WritePlain(Path("train-images-idx3-ubyte"),
             BigEndian(0x803) + BigEndian(3) + std::string(1, '\0'));
  absl::Status s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected 12 bytes of dimensions, got 5"));
  WritePlain(Path("train-images-idx3-ubyte"), std::string(2, '\0'));
  s = LoadIdxDataset(dir_, "train").status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected 4 bytes of magic number, got 2"));
}

TEST_F(IdxDatasetTest, TruncatedGzipStreamIsAnError) {
  std::string pixels;
  for (int i = 0; i < 3 * 28 * 28; ++i) pixels += static_cast<char>((i * 7919) % 251);
  WriteGz(Path("train-images-idx3-ubyte.gz"), Images(3, 28, 28, pixels));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(3, kLabels));
  const auto size = std::filesystem::file_size(Path("train-images-idx3-ubyte.gz"));
  std::filesystem::resize_file(Path("train-images-idx3-ubyte.gz"), size / 2);
  absl::Status s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(Path("train-images-idx3-ubyte.gz")));
}

TEST_F(IdxDatasetTest, TrailingBytesAreAnError) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), Images(3, 2, 3, kPixels + "x"));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), Labels(3, kLabels));
  absl::Status s = LoadIdxDataset(dir_, "train").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trailing data: expected 34 bytes"));
}

TEST_F(IdxDatasetTest, RejectsUnknownSplit) {
  absl::Status s = LoadIdxDataset(dir_, "test").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("split 'test': expected \"train\" or \"t10k\""));
}

// Debian's dataset-fashion-mnist, when installed.
TEST(FashionMnistTest, ReadsTheInstalledFiles) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " is absent";
  absl::StatusOr<ImageDataset> test = LoadIdxDataset(dir, "t10k");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->count, 10000);
  EXPECT_EQ(test->rows, 28);
  EXPECT_EQ(test->cols, 28);
  ASSERT_EQ(test->images.size(), 10000u * 28 * 28);
  ASSERT_EQ(test->labels.size(), 10000u);
  std::set<int64_t> classes(test->labels.begin(), test->labels.end());
  EXPECT_THAT(classes, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  float lo = 1, hi = 0;
  for (float v : test->images) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  // The first test image is an ankle boot (class 9) in every copy of the set.
  EXPECT_EQ(test->labels[0], 9);

  absl::StatusOr<ImageDataset> train = LoadIdxDataset(dir, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->count, 60000);
  EXPECT_EQ(train->images.size(), 60000u * 28 * 28);
}

}  // namespace
}  // namespace replicad::client
