// Feeds bytes to ParseTrainingConfig (what a checkpoint's training
// configuration and a rank command's carry, core/train/training_config.h).
// Asserts: text that does not parse is refused InvalidArgument; what parses
// is written back by FormatTrainingConfig as text that parses to the same
// configuration (formatting it again gives the same bytes), and its
// fingerprint is stable.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/train/training_config.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad;
  using replicad::fuzz::Violated;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<TrainingConfig> config = ParseTrainingConfig(text);
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) {
      Violated(absl::StrCat("ParseTrainingConfig failed with ", config.status().ToString()));
    }
    return 0;
  }
  const std::string written = FormatTrainingConfig(*config);
  absl::StatusOr<TrainingConfig> again = ParseTrainingConfig(written);
  if (!again.ok()) {
    Violated(
        absl::StrCat("its own text does not parse: ", again.status().ToString(), "\n", written));
  }
  if (FormatTrainingConfig(*again) != written) {
    Violated(absl::StrCat("the text changed on a round trip:\n", written, "\nbecame\n",
                          FormatTrainingConfig(*again)));
  }
  if (TrainingFingerprint(*again) != TrainingFingerprint(*config)) {
    Violated("the fingerprint changed on a round trip");
  }
  return 0;
}
