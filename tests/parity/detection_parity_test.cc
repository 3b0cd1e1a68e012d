// Parity with PyTorch for torchvision's detection models, post-processing included (issue #38):
// ssdlite320_mobilenet_v3_large and retinanet_resnet50_fpn, exported whole for one image
// [3, 320, 320] by tests/parity/export_detection_models.py (seeded weights drawn so that scores
// spread; see there), loaded with LoadOnnxFile and served over 1 and 2 CPU slots. Their
// post-processing (NonZero over the score threshold, TopK of a computed K, NonMaxSuppression in an
// If) runs in the plan's data-dependent part, and every image's detections come back with the
// count PyTorch finds.
//
// Detections are compared as sets: two with near-equal scores may come in either order (scores
// within 1e-6 of each other, which two implementations' rounding orders differently). Each of
// PyTorch's detections must be matched, in score order, by one of ours of the same label whose
// score is within 1e-4 and box within 1e-4 of the image size; then the boxes' relative L2 error
// over all matched detections must be at most 1e-4, as the classifiers' outputs are. Every image
// must have detections (the fixtures record PyTorch's count), so the test cannot pass on empty
// outputs.
//
// Outside the sanitizer builds (as r3d_18 of torchvision_parity_test): retinanet's backbone
// takes a minute a run under ASan and TSan. Without torch under /usr/bin/python3 every case is
// skipped with the reason.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/onnx_import.h"
#include "gtest/gtest.h"
#include "tests/parity/parity_fixtures.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::ReadManifest;
using testing::ReadNpyTensor;

constexpr double kTolerance = 1e-4;

std::string FixturesDir() {
  return testing::FromEnvOr("REPLICAD_DETECTION_FIXTURES", REPLICAD_DETECTION_FIXTURES_DEFAULT);
}

const testing::Fixtures& ExportFixtures() {
  static const testing::Fixtures* const fixtures =
      new testing::Fixtures(testing::RunExportScript(REPLICAD_DETECTION_SCRIPT, FixturesDir()));
  return *fixtures;
}

struct Detections {
  Tensor boxes, scores, labels;
  int64_t count() const { return scores.shape()[0]; }
};

// Matches every expected detection (in its order: descending score) to an
// unmatched actual one of the same label, score within kTolerance and box
// within kTolerance * image_size; returns the index of the match per
// expected detection, or a message naming the first unmatched one.
absl::StatusOr<std::vector<int64_t>> Match(const Detections& actual, const Detections& expected,
                                           double image_size) {
  std::vector<bool> used(actual.count(), false);
  std::vector<int64_t> match;
  for (int64_t e = 0; e < expected.count(); ++e) {
    const float* eb = expected.boxes.data<float>() + e * 4;
    int64_t found = -1;
    for (int64_t a = 0; a < actual.count() && found < 0; ++a) {
      if (used[a] || actual.labels.data<int64_t>()[a] != expected.labels.data<int64_t>()[e] ||
          std::abs(actual.scores.data<float>()[a] - expected.scores.data<float>()[e]) >
              kTolerance) {
        continue;
      }
      const float* ab = actual.boxes.data<float>() + a * 4;
      bool close = true;
      for (int k = 0; k < 4; ++k) close &= std::abs(ab[k] - eb[k]) <= kTolerance * image_size;
      if (close) found = a;
    }
    if (found < 0) {
      return absl::NotFoundError(
          absl::StrCat("torch's detection ", e, " (label ", expected.labels.data<int64_t>()[e],
                       ", score ", expected.scores.data<float>()[e], ", box [", eb[0], ", ", eb[1],
                       ", ", eb[2], ", ", eb[3], "]) has no match"));
    }
    used[found] = true;
    match.push_back(found);
  }
  return match;
}

class DetectionParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DetectionParityTest, FindsPyTorchsDetectionsOverOneAndTwoSlots) {
  const std::string name = GetParam();
  const testing::Fixtures& fixtures = ExportFixtures();
  if (!fixtures.skip_reason.empty()) GTEST_SKIP() << fixtures.skip_reason;
  const std::string dir = FixturesDir() + "/" + name;
  absl::StatusOr<nlohmann::json> manifest = ReadManifest(dir + "/manifest.json");
  ASSERT_TRUE(manifest.ok()) << manifest.status() << "\nexport_detection_models.py exited "
                             << fixtures.exit_code << ":\n"
                             << fixtures.output;
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxFile(dir + "/" + manifest->at("model").get<std::string>(), name);
  ASSERT_TRUE(model.ok()) << model.status();
  const int boxes = (*model)->OutputIndex("boxes"), scores = (*model)->OutputIndex("scores"),
            labels = (*model)->OutputIndex("labels");
  ASSERT_TRUE(boxes >= 0 && scores >= 0 && labels >= 0);
  for (int slots : {1, 2}) {
    std::unique_ptr<ReplicaSet> set =
        testing::MakeCpuReplicaSet(*model, std::vector<double>(slots, 1.0));
    for (const nlohmann::json& entry : manifest->at("images")) {
      const std::string image_file = entry.at("image").get<std::string>();
      absl::StatusOr<Tensor> image = ReadNpyTensor(dir + "/" + image_file);
      ASSERT_TRUE(image.ok()) << image.status();
      const double image_size = static_cast<double>(image->shape()[2]);
      Detections expected;
      for (auto [key, into] :
           {std::pair{"boxes", &expected.boxes}, std::pair{"scores", &expected.scores},
            std::pair{"labels", &expected.labels}}) {
        absl::StatusOr<Tensor> t = ReadNpyTensor(dir + "/" + entry.at(key).get<std::string>());
        ASSERT_TRUE(t.ok()) << t.status();
        *into = *std::move(t);
      }
      ASSERT_GT(expected.count(), 0) << "the fixtures must hold detections";
      testing::PredictOutcome outcome = testing::PredictAndWait(*set, {*image});
      ASSERT_TRUE(outcome.status.ok())
          << image_file << ", " << slots << " slots: " << outcome.status;
      // One image is one request, computed whole on one slot.
      EXPECT_EQ(outcome.slices.size(), 1u);
      Detections actual{outcome.outputs[boxes], outcome.outputs[scores], outcome.outputs[labels]};
      ASSERT_EQ(actual.boxes.shape(), Shape({actual.count(), 4}));
      ASSERT_EQ(actual.labels.dtype(), DType::kInt64);
      EXPECT_EQ(actual.count(), expected.count()) << image_file << ", " << slots << " slots";
      absl::StatusOr<std::vector<int64_t>> match = Match(actual, expected, image_size);
      ASSERT_TRUE(match.ok()) << image_file << ", " << slots << " slots: " << match.status();
      double diff = 0, norm = 0;
      for (int64_t e = 0; e < expected.count(); ++e) {
        for (int k = 0; k < 4; ++k) {
          const double a = actual.boxes.data<float>()[(*match)[e] * 4 + k];
          const double b = expected.boxes.data<float>()[e * 4 + k];
          diff += (a - b) * (a - b);
          norm += b * b;
        }
      }
      const double error = std::sqrt(diff / norm);
      std::cout << name << " " << image_file << " " << slots << " slot(s): " << actual.count()
                << " detections (torch " << expected.count() << "), boxes rel. L2 " << error
                << std::endl;
      EXPECT_LE(error, kTolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DetectionParityTest,
                         ::testing::Values("ssdlite320_mobilenet_v3_large",
                                           "retinanet_resnet50_fpn"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace replicad
