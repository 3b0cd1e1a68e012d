// The borrowed answers, read back by protobuf: the typed message, byte for
// byte where protobuf's own order is fixed (no maps).
//
// For Predict the borrowed answer is byte for byte protobuf's own serialization.
#include "server/grpc/wire_response.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/grpc/wire_test_util.h"

namespace replicad {
namespace {

using testing::Canonical;
using testing::Joined;

class WireResponseTest : public ::testing::Test {
 protected:
  // A buffer of `bytes` random bytes, or null for none.
  std::shared_ptr<HostBuffer> Filled(size_t bytes) {
    if (bytes == 0 && rng_() % 2) return nullptr;
    absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = pool_.Get(bytes);
    EXPECT_TRUE(buffer.ok());
    for (size_t i = 0; i < bytes; ++i) (*buffer)->data()[i] = static_cast<char>(rng_());
    return *buffer;
  }
  size_t RandomSize() {
    static constexpr size_t kSizes[] = {0, 1, 100, 4095, 4096, 128000, 300000};
    return kSizes[rng_() % 7];
  }

  HostBufferPool pool_{size_t{64} << 20};
  std::mt19937 rng_{7};
};

TEST_F(WireResponseTest, PredictResponseIsProtobufsSerialization) {
  for (int round = 0; round < 50; ++round) {
    v1::PredictResponse head;
    head.set_model(round % 3 ? "resnet" : "");
    std::vector<std::shared_ptr<HostBuffer>> raw;
    for (int i = rng_() % 4; i > 0; --i) {
      v1::Tensor* t = head.add_outputs();
      t->set_name(i % 2 ? "logits" : "");
      t->set_dtype(v1::DATA_TYPE_FLOAT32);
      for (int d = rng_() % 3; d > 0; --d) t->add_shape(rng_() % 1000);
      raw.push_back(Filled(RandomSize()));
    }
    for (int i = rng_() % 3; i > 0; --i) {
      v1::SliceInfo* s = head.add_slices();
      s->set_slot("r0");
      s->set_device("cpu:0");
      s->set_end(i);
    }
    v1::PredictResponse typed = head;
    for (int i = 0; i < typed.outputs_size(); ++i) {
      typed.mutable_outputs(i)->set_raw(std::string(BytesOf(raw[i])));
    }
    const std::string wire = Joined(EncodePredictResponse(head, raw));
    EXPECT_EQ(wire, typed.SerializeAsString());
    v1::PredictResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    EXPECT_EQ(Canonical(parsed), Canonical(typed));
  }
}

TEST_F(WireResponseTest, ModelInferResponseParsesAsTheTypedOne) {
  for (int round = 0; round < 50; ++round) {
    inference::ModelInferResponse head;
    head.set_model_name("m");
    head.set_model_version("1");
    head.set_id(round % 2 ? "request-7" : "");
    std::vector<std::shared_ptr<HostBuffer>> raw;
    for (int i = rng_() % 4; i > 0; --i) {
      auto* t = head.add_outputs();
      t->set_name("y");
      t->set_datatype("FP32");
      t->add_shape(rng_() % 100);
      if (rng_() % 3 == 0) {  // In shared memory: an empty entry.
        (*t->mutable_parameters())["shared_memory_region"].set_string_param("r");
        (*t->mutable_parameters())["shared_memory_byte_size"].set_int64_param(16);
        raw.push_back(nullptr);
      } else {
        raw.push_back(Filled(RandomSize()));
      }
    }
    inference::ModelInferResponse typed = head;
    for (const auto& r : raw) typed.add_raw_output_contents(std::string(BytesOf(r)));
    const std::string wire = Joined(EncodeModelInferResponse(head, raw));
    inference::ModelInferResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    EXPECT_EQ(Canonical(parsed), Canonical(typed));
    EXPECT_EQ(parsed.raw_output_contents_size(), static_cast<int>(raw.size()));
  }
}

TEST_F(WireResponseTest, TheResponseHoldsItsBuffersPastThePool) {
  auto pool = std::make_unique<HostBufferPool>(size_t{64} << 20);
  std::shared_ptr<HostBuffer> buffer = *pool->Get(100000);
  std::memset(buffer->data(), 'q', buffer->size());
  v1::PredictResponse head;
  head.add_outputs()->set_name("y");
  grpc::ByteBuffer response = EncodePredictResponse(head, {buffer});
  const char* data = buffer->data();
  buffer.reset();
  EXPECT_EQ(pool->idle_bytes(), 0u);  // Still borrowed by the response.
  {
    grpc::ByteBuffer copy = response;  // As gRPC keeps it while sending.
    response.Clear();
    EXPECT_EQ(pool->idle_bytes(), 0u);
  }
  EXPECT_GT(pool->idle_bytes(), 0u);  // Back once the last reference went.
  absl::StatusOr<std::shared_ptr<HostBuffer>> again = pool->Get(100000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->data(), data);

  // A response that outlives its pool frees the buffer itself.
  std::memset((*again)->data(), 'r', 100000);
  grpc::ByteBuffer late = EncodePredictResponse(head, {*again});
  again->reset();
  pool.reset();
  v1::PredictResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Joined(late)));
  EXPECT_EQ(parsed.outputs(0).raw(), std::string(100000, 'r'));
}

}  // namespace
}  // namespace replicad
