// Feeds bytes to the .npy reader, client::DecodeNpy (what `replicactl
// predict --npy` and ReadNpy decode).
// Asserts: a decoded tensor has dtype FLOAT32, FLOAT16, INT64, INT32,
// INT8, UINT8 or BOOL, non-negative dims and
// raw size = product(shape) * element size; EncodeNpy accepts it, and
// decoding what it wrote gives the same tensor back (a round trip); the
// encoding's data starts at a multiple of 64 bytes, as NumPy writes it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/message_differencer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad;
  using replicad::fuzz::Violated;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<v1::Tensor> tensor = client::DecodeNpy(bytes, "fuzz.npy");
  if (!tensor.ok()) {
    if (tensor.status().code() != absl::StatusCode::kInvalidArgument) {
      Violated(absl::StrCat("DecodeNpy failed with ", tensor.status().ToString()));
    }
    return 0;
  }
  int64_t element_size = 0;
  switch (tensor->dtype()) {
    case v1::DATA_TYPE_FLOAT32:
    case v1::DATA_TYPE_INT32:
      element_size = 4;
      break;
    case v1::DATA_TYPE_INT64:
      element_size = 8;
      break;
    case v1::DATA_TYPE_FLOAT16:
      element_size = 2;
      break;
    case v1::DATA_TYPE_INT8:
    case v1::DATA_TYPE_UINT8:
    case v1::DATA_TYPE_BOOL:
      element_size = 1;
      break;
    default:
      Violated(absl::StrCat("decoded dtype ", tensor->dtype()));
  }
  const std::vector<int64_t> shape(tensor->shape().begin(), tensor->shape().end());
  const int64_t expected = fuzz::ByteCount(shape, element_size);
  if (expected < 0 || static_cast<uint64_t>(expected) != tensor->raw().size()) {
    Violated(
        absl::StrCat("raw holds ", tensor->raw().size(), " bytes, the shape needs ", expected));
  }
  absl::StatusOr<std::string> encoded = client::EncodeNpy(*tensor);
  if (!encoded.ok())
    Violated(absl::StrCat("EncodeNpy refused a decoded tensor: ", encoded.status().ToString()));
  if ((encoded->size() - tensor->raw().size()) % 64 != 0) {
    Violated("the encoded data does not start at a multiple of 64 bytes");
  }
  absl::StatusOr<v1::Tensor> again = client::DecodeNpy(*encoded, "encoded.npy");
  if (!again.ok()) Violated(absl::StrCat("re-decoding failed: ", again.status().ToString()));
  if (!google::protobuf::util::MessageDifferencer::Equals(*tensor, *again)) {
    Violated("decode -> encode -> decode changed the tensor");
  }
  return 0;
}
