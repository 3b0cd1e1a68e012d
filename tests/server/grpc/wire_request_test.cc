// The wire walks against protobuf's own parse: on generated messages, on
// encodings protobuf accepts but never writes, on every truncation of a
// small message and on random mutations, each result must be protobuf's
// message (tensor bytes put back) or, where protobuf refuses, INVALID_ARGUMENT.
//
// The request fuzzers send their inputs as raw bytes, so the walk also sees what protobuf refuses;
// here thousands of random mutations of each message are checked the same way.
#include "server/grpc/wire_request.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/grpc/wire_test_util.h"

namespace replicad {
namespace {

using testing::Canonical;
using testing::Fixed32Field;
using testing::Fixed64Field;
using testing::GroupField;
using ::testing::HasSubstr;
using testing::LengthField;
using testing::Sliced;
using testing::Tag;
using testing::Varint;
using testing::VarintField;

class WireRequestTest : public ::testing::Test {
 protected:
  // Checks ReadPredictRequest against protobuf on `bytes`; its status.
  absl::Status PredictLikeProtobuf(const std::string& bytes) {
    SCOPED_TRACE(absl::CEscape(bytes.substr(0, 200)));
    v1::PredictRequest expected;
    const bool parses = expected.ParseFromString(bytes);
    absl::StatusOr<WirePredictRequest> got = ReadPredictRequest(Sliced(bytes, rng_), pool_);
    if (!parses) {
      EXPECT_FALSE(got.ok()) << "protobuf refuses what the walk accepts";
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
      }
      return got.status();
    }
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return got.status();
    EXPECT_EQ(got->raw.size(), static_cast<size_t>(got->message.inputs_size()));
    if (got->raw.size() != static_cast<size_t>(got->message.inputs_size())) return got.status();
    v1::PredictRequest joined = got->message;
    for (int i = 0; i < joined.inputs_size(); ++i) {
      EXPECT_TRUE(joined.inputs(i).raw().empty());
      const std::shared_ptr<HostBuffer>& raw = got->raw[i];
      if (raw == nullptr) continue;
      EXPECT_GT(raw->size(), 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(raw->data()) % HostBufferPool::kAlignment, 0u);
      joined.mutable_inputs(i)->set_raw(raw->data(), raw->size());
    }
    EXPECT_EQ(Canonical(joined), Canonical(expected));
    return absl::OkStatus();
  }

  // The same for ReadModelInferRequest.
  absl::Status InferLikeProtobuf(const std::string& bytes) {
    SCOPED_TRACE(absl::CEscape(bytes.substr(0, 200)));
    inference::ModelInferRequest expected;
    const bool parses = expected.ParseFromString(bytes);
    absl::StatusOr<WireInferRequest> got = ReadModelInferRequest(Sliced(bytes, rng_), pool_);
    if (!parses) {
      EXPECT_FALSE(got.ok()) << "protobuf refuses what the walk accepts";
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
      }
      return got.status();
    }
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return got.status();
    const size_t inputs = got->message.inputs_size();
    EXPECT_EQ(got->fp32_contents.size(), inputs);
    EXPECT_EQ(got->int64_contents.size(), inputs);
    if (got->fp32_contents.size() != inputs || got->int64_contents.size() != inputs) {
      return got.status();
    }
    inference::ModelInferRequest joined = got->message;
    EXPECT_EQ(joined.raw_input_contents_size(), 0);
    for (const auto& raw : got->raw_input_contents) {
      joined.add_raw_input_contents(std::string(BytesOf(raw)));
    }
    for (size_t i = 0; i < inputs; ++i) {
      auto* input = joined.mutable_inputs(i);
      EXPECT_EQ(input->contents().fp32_contents_size(), 0);
      EXPECT_EQ(input->contents().int64_contents_size(), 0);
      if (const auto& fp32 = got->fp32_contents[i]; fp32 != nullptr) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(fp32->data()) % HostBufferPool::kAlignment, 0u);
        for (size_t k = 0; k < fp32->size() / sizeof(float); ++k) {
          float value;
          std::memcpy(&value, fp32->data() + k * sizeof(float), sizeof(float));
          input->mutable_contents()->add_fp32_contents(value);
        }
      }
      if (const auto& int64 = got->int64_contents[i]; int64 != nullptr) {
        for (size_t k = 0; k < int64->size() / sizeof(int64_t); ++k) {
          int64_t value;
          std::memcpy(&value, int64->data() + k * sizeof(int64_t), sizeof(int64_t));
          input->mutable_contents()->add_int64_contents(value);
        }
      }
    }
    EXPECT_EQ(Canonical(joined), Canonical(expected));
    return absl::OkStatus();
  }

  std::string RandomBytes(size_t n) {
    std::string out(n, '\0');
    for (char& c : out) c = static_cast<char>(rng_());
    return out;
  }
  std::string RandomName() {
    std::string out(rng_() % 8, 'a');
    for (char& c : out) c = static_cast<char>('a' + rng_() % 26);
    return out;
  }
  size_t RandomSize() {
    static constexpr size_t kSizes[] = {0, 1, 7, 64, 1000, 70000};
    return kSizes[rng_() % 6];
  }

  v1::PredictRequest RandomPredict() {
    v1::PredictRequest request;
    request.set_model(RandomName());
    for (int i = rng_() % 4; i > 0; --i) {
      v1::Tensor* t = request.add_inputs();
      t->set_name(RandomName());
      t->set_dtype(static_cast<v1::DataType>(rng_() % 9));  // Unknown values too.
      for (int d = rng_() % 5; d > 0; --d) t->add_shape(static_cast<int64_t>(rng_()) - (1 << 30));
      t->set_raw(RandomBytes(RandomSize()));
    }
    for (int i = rng_() % 3; i > 0; --i) request.add_output_names(RandomName());
    return request;
  }

  void RandomParameter(google::protobuf::Map<std::string, inference::InferParameter>* map) {
    inference::InferParameter& p = (*map)[RandomName()];
    switch (rng_() % 3) {
      case 0:
        p.set_bool_param(rng_() % 2);
        break;
      case 1:
        p.set_int64_param(static_cast<int64_t>(rng_()) - (1 << 20));
        break;
      default:
        p.set_string_param(RandomName());
    }
  }

  inference::ModelInferRequest RandomInfer() {
    inference::ModelInferRequest request;
    request.set_model_name(RandomName());
    request.set_model_version(rng_() % 2 ? "1" : "");
    request.set_id(RandomName());
    for (int i = rng_() % 3; i > 0; --i) RandomParameter(request.mutable_parameters());
    const bool raw = rng_() % 2;
    for (int i = rng_() % 4; i > 0; --i) {
      auto* t = request.add_inputs();
      t->set_name(RandomName());
      t->set_datatype(rng_() % 2 ? "FP32" : "INT64");
      for (int d = rng_() % 4; d > 0; --d) t->add_shape(rng_() % 100);
      if (rng_() % 4 == 0) RandomParameter(t->mutable_parameters());
      if (raw) {
        request.add_raw_input_contents(RandomBytes(RandomSize()));
        continue;
      }
      const size_t n = RandomSize() / 4;
      switch (rng_() % 5) {
        case 0:
          break;  // No contents.
        case 1:
          for (size_t k = 0; k < n; ++k) {
            t->mutable_contents()->add_fp32_contents(static_cast<float>(rng_()) / 7);
          }
          if (n == 0) t->mutable_contents();  // Present, empty.
          break;
        case 2:
          for (size_t k = 0; k < n; ++k) {
            const uint64_t v = (uint64_t{rng_()} << 32 | rng_()) >> (rng_() % 64);
            t->mutable_contents()->add_int64_contents(static_cast<int64_t>(v));
          }
          break;
        case 3:
          t->mutable_contents()->add_int_contents(static_cast<int32_t>(rng_()));
          t->mutable_contents()->add_fp32_contents(1.5f);
          break;
        default:
          t->mutable_contents()->add_bytes_contents(RandomBytes(5));
      }
    }
    for (int i = rng_() % 3; i > 0; --i) {
      auto* o = request.add_outputs();
      o->set_name(RandomName());
      if (rng_() % 2) RandomParameter(o->mutable_parameters());
    }
    return request;
  }

  // `bytes` with one random change: a byte set, a byte inserted, one removed.
  std::string Mutated(std::string bytes) {
    if (bytes.empty()) return RandomBytes(1 + rng_() % 4);
    const size_t at = rng_() % bytes.size();
    switch (rng_() % 3) {
      case 0:
        bytes[at] = static_cast<char>(rng_());
        break;
      case 1:
        bytes.insert(bytes.begin() + at, static_cast<char>(rng_()));
        break;
      default:
        bytes.erase(at, 1);
    }
    return bytes;
  }

  HostBufferPool pool_{size_t{64} << 20};
  std::mt19937 rng_{20240611};
};

TEST_F(WireRequestTest, PredictGeneratedMessagesRoundTrip) {
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(PredictLikeProtobuf(RandomPredict().SerializeAsString()).ok());
  }
}

TEST_F(WireRequestTest, PredictEmptyMessages) {
  absl::StatusOr<WirePredictRequest> empty = ReadPredictRequest(grpc::ByteBuffer(), pool_);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->message.inputs_size(), 0);
  EXPECT_TRUE(PredictLikeProtobuf("").ok());
  // An empty tensor, and one with an empty raw written out.
  EXPECT_TRUE(PredictLikeProtobuf(LengthField(2, "") + LengthField(2, LengthField(4, ""))).ok());
}

TEST_F(WireRequestTest, PredictEncodingsProtobufAcceptsButNeverWrites) {
  const std::string x = LengthField(1, "x");
  const std::string raw = LengthField(4, "0123456789abcdef");
  const std::vector<std::string> cases = {
      // Fields out of order, in both messages.
      LengthField(3, "out") + LengthField(2, raw + VarintField(2, 1) + x) + LengthField(1, "m"),
      // A repeated singular field: the last wins (raw, model, dtype).
      LengthField(2, raw + x + LengthField(4, "last") + VarintField(2, 7) + VarintField(2, 1)) +
          LengthField(1, "a") + LengthField(1, "b"),
      // A raw then an empty raw: the empty one wins.
      LengthField(2, raw + LengthField(4, "")),
      // Unknown fields of every wire type, at both levels, a group nested in a group.
      VarintField(9, 300) + Fixed64Field(10, 1) + Fixed32Field(11, 2) + LengthField(12, "u") +
          GroupField(13, VarintField(1, 5) + GroupField(2, LengthField(3, "g"))) +
          LengthField(2, GroupField(15, "") + raw + VarintField(99, 1) + LengthField(1000, "z")),
      // Known field numbers with other wire types: unknown fields to protobuf.
      VarintField(2, 5) + LengthField(2, VarintField(4, 1) + Fixed32Field(4, 3) + raw),
      // Tags and lengths written longer than needed.
      std::string("\x92\x00", 2) + Varint(raw.size() + 1) + std::string("\xa2\x00", 2) +
          raw.substr(1),
      std::string("\x12\x92\x80\x80\x80\x00", 6) + LengthField(1, std::string(16, 'n')),
      // Negative and 10-byte shape values, packed and loose.
      LengthField(2, LengthField(3, Varint(uint64_t{1} << 63) + Varint(3)) + VarintField(3, 4)),
  };
  for (const std::string& bytes : cases) EXPECT_TRUE(PredictLikeProtobuf(bytes).ok());

  absl::StatusOr<WirePredictRequest> last = ReadPredictRequest(Sliced(cases[1], rng_), pool_);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(BytesOf(last->raw[0]), "last");
  EXPECT_EQ(last->message.model(), "b");
}

TEST_F(WireRequestTest, PredictMalformedBytesAreInvalidArgumentNamingWhatAndWhere) {
  struct Case {
    std::string bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {LengthField(1, "m") + "\x12\x80",
       "request is not a valid replicad.v1.PredictRequest: inputs[0]: truncated length at byte 4"},
      {LengthField(2, Tag(4, 2) + Varint(1000) + "abc"),
       "inputs[0].raw: length 1000 runs past the end of its message (3 bytes left) at byte 3"},
      {Tag(2, 2) + Varint(50) + "abc", "length 50 runs past the end of its message (3 bytes left)"},
      {LengthField(2, Tag(4, 2) + std::string("\xff\xff\xff\xff\x0f", 5)),
       "inputs[0].raw: length of 2 GiB or more at byte 3"},
      {VarintField(9, 1).substr(0, 1) + "\xff\xff", "truncated varint at byte 1"},
      {std::string("\x08") + std::string(11, '\xff'), "varint longer than 10 bytes at byte 1"},
      {Tag(3, 6) + "x", "invalid wire type 6 (field 3) at byte 1"},
      {LengthField(2, Tag(5, 7)), "inputs[0]: invalid wire type 7 (field 5) at byte 3"},
      {std::string("\x00", 1), "tag 0 (no field) at byte 0"},
      {std::string("\x02\x00", 2), "field number 0 at byte 0"},
      {Tag(9, 4), "end-group tag of field 9 without a start at byte 1"},
      {Tag(9, 3) + VarintField(1, 1), "group of field 9 not ended at byte 1"},
      {Tag(9, 3) + Tag(8, 4), "end-group tag of field 8 in a group of field 9 at byte 2"},
      {std::string("\x80\x80\x80\x80\x80\x01", 6), "tag longer than 5 bytes at byte 0"},
      {LengthField(1, "\xff"), "protobuf refuses its fields"},  // Not UTF-8.
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::CEscape(c.bytes));
    absl::Status status = PredictLikeProtobuf(c.bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
}

TEST_F(WireRequestTest, PredictLengthsAreCheckedBeforeABufferIsTaken) {
  HostBufferPool pool(size_t{1} << 30);
  std::mt19937 rng(1);
  // 1 MiB claimed, 10 bytes sent: a buffer taken first would be idle afterwards.
  const std::string bytes = LengthField(2, Tag(4, 2) + Varint(1 << 20) + std::string(10, 'x'));
  absl::StatusOr<WirePredictRequest> got = ReadPredictRequest(Sliced(bytes, rng), pool);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.idle_bytes(), 0u);
  for (uint64_t claimed : {uint64_t{std::numeric_limits<int32_t>::max()} - 17,
                           uint64_t{std::numeric_limits<uint32_t>::max()}, uint64_t{1} << 62}) {
    const std::string huge = Tag(2, 2) + Varint(claimed) + "abc";
    EXPECT_EQ(ReadPredictRequest(Sliced(huge, rng), pool).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(PredictLikeProtobuf(huge).code() == absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(pool.idle_bytes(), 0u);
}

TEST_F(WireRequestTest, PredictTruncatedAtEveryByte) {
  v1::PredictRequest request;
  request.set_model("m");
  v1::Tensor* t = request.add_inputs();
  t->set_name("x");
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(2);
  t->add_shape(-1);
  t->set_raw(RandomBytes(24));
  request.add_inputs()->set_raw("yz");
  request.add_output_names("out");
  const std::string bytes =
      request.SerializeAsString() + GroupField(20, VarintField(1, 1 << 20)) + Fixed64Field(21, 9);
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const absl::Status s = PredictLikeProtobuf(bytes.substr(0, n));
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
  }
}

TEST_F(WireRequestTest, PredictRandomMutations) {
  int accepted = 0, refused = 0;
  for (int i = 0; i < 5000; ++i) {
    v1::PredictRequest request = RandomPredict();
    for (auto& t : *request.mutable_inputs()) t.mutable_raw()->resize(t.raw().size() % 9);
    std::string bytes = request.SerializeAsString();
    for (int m = 1 + rng_() % 3; m > 0; --m) bytes = Mutated(bytes);
    const absl::Status s = PredictLikeProtobuf(bytes);
    ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
    ++(s.ok() ? accepted : refused);
  }
  // Both sides of the comparison were exercised.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
}

TEST_F(WireRequestTest, InferGeneratedMessagesRoundTrip) {
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(InferLikeProtobuf(RandomInfer().SerializeAsString()).ok());
  }
}

TEST_F(WireRequestTest, InferPackedContentsAreGathered) {
  inference::ModelInferRequest request;
  auto* a = request.add_inputs();
  for (int k = 0; k < 1000; ++k) a->mutable_contents()->add_fp32_contents(k * 0.5f);
  auto* b = request.add_inputs();
  for (int64_t v :
       {int64_t{0}, int64_t{-1}, int64_t{1} << 40, std::numeric_limits<int64_t>::min()}) {
    b->mutable_contents()->add_int64_contents(v);
  }
  request.add_inputs()->set_name("none");
  absl::StatusOr<WireInferRequest> got =
      ReadModelInferRequest(Sliced(request.SerializeAsString(), rng_), pool_);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->fp32_contents.size(), 3u);
  ASSERT_NE(got->fp32_contents[0], nullptr);
  ASSERT_EQ(got->fp32_contents[0]->size(), 4000u);
  EXPECT_EQ(std::memcmp(got->fp32_contents[0]->data(), a->contents().fp32_contents().data(), 4000),
            0);
  ASSERT_NE(got->int64_contents[1], nullptr);
  ASSERT_EQ(got->int64_contents[1]->size(), 32u);
  EXPECT_EQ(std::memcmp(got->int64_contents[1]->data(), b->contents().int64_contents().data(), 32),
            0);
  EXPECT_EQ(got->fp32_contents[2], nullptr);
  EXPECT_EQ(got->int64_contents[2], nullptr);
}

TEST_F(WireRequestTest, InferEncodingsProtobufAcceptsButNeverWrites) {
  std::string floats;
  for (float f : {1.0f, -2.5f, 3.25f}) floats.append(reinterpret_cast<const char*>(&f), 4);
  const std::string packed_fp32 = LengthField(6, floats);
  const std::string packed_int64 = LengthField(3, Varint(5) + Varint(~uint64_t{0}) + Varint(0));
  const std::string name = LengthField(1, "x") + LengthField(2, "FP32");
  const std::vector<std::string> cases = {
      // Loose elements, several runs, contents given twice (protobuf merges it): protobuf's parse.
      LengthField(5, name + LengthField(5, Fixed32Field(6, 7) + Fixed32Field(6, 8))),
      LengthField(5, name + LengthField(5, packed_fp32 + packed_fp32 + Fixed32Field(6, 1))),
      LengthField(5, name + LengthField(5, packed_fp32) + LengthField(5, packed_fp32)),
      LengthField(5, LengthField(5, VarintField(3, 1) + packed_int64 + VarintField(3, 2))),
      LengthField(5, LengthField(5, packed_int64 + packed_int64)),
      // One run each, fields out of order, unknown fields around them.
      LengthField(5, LengthField(5, VarintField(77, 1) + packed_int64 + packed_fp32) + name) +
          LengthField(3, "id") + LengthField(1, "m") + VarintField(50, 1),
      // Contents given twice, each with one field: gathered.
      LengthField(5, LengthField(5, packed_fp32) + LengthField(5, packed_int64)),
      // Empty runs and empty contents.
      LengthField(5, LengthField(5, LengthField(6, "") + LengthField(3, ""))) +
          LengthField(5, LengthField(5, "")),
      // fp32/int64 fields with other wire types: unknown fields to protobuf.
      LengthField(5, LengthField(5, VarintField(6, 1) + Fixed64Field(3, 2) + packed_fp32)),
      // raw_input_contents before the inputs, an empty entry, a loose varint 7 (unknown).
      LengthField(7, "abcd") + LengthField(7, "") + VarintField(7, 3) + LengthField(5, name) +
          LengthField(5, name),
      // A varint of 10 bytes whose last byte carries more than bit 63.
      LengthField(5, LengthField(5, LengthField(3, std::string(9, '\xff') + "\x7f"))),
  };
  for (const std::string& bytes : cases) EXPECT_TRUE(InferLikeProtobuf(bytes).ok());
}

TEST_F(WireRequestTest, InferMalformedContentsAreInvalidArgument) {
  struct Case {
    std::string bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {LengthField(5, LengthField(5, LengthField(6, "abcde"))),
       "inputs[0].contents.fp32_contents: a packed run of 5 bytes is not a whole number of floats"},
      {LengthField(5, LengthField(5, LengthField(3, "\x01\x80"))),
       "inputs[0].contents.int64_contents: packed run ends inside a varint"},
      {LengthField(5, LengthField(5, LengthField(3, std::string(10, '\x80') + "\x01"))),
       "inputs[0].contents.int64_contents: varint longer than 10 bytes"},
      {LengthField(7, "ab") + Tag(7, 2) + Varint(9) + "abc",
       "raw_input_contents[1]: length 9 runs past the end of its message (3 bytes left)"},
      {LengthField(5, Tag(5, 2) + Varint(4) + "ab"),
       "inputs[0].contents: length 4 runs past the end of its message (2 bytes left)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::CEscape(c.bytes));
    absl::Status status = InferLikeProtobuf(c.bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("request is not a valid inference.ModelInferRequest: "));
  }
}

TEST_F(WireRequestTest, InferTruncatedAtEveryByte) {
  inference::ModelInferRequest request;
  request.set_model_name("m");
  request.set_id("7");
  (*request.mutable_parameters())["priority"].set_int64_param(2);
  auto* a = request.add_inputs();
  a->set_name("a");
  a->set_datatype("FP32");
  a->add_shape(3);
  for (float f : {1.0f, 2.0f, 3.0f}) a->mutable_contents()->add_fp32_contents(f);
  auto* b = request.add_inputs();
  b->set_datatype("INT64");
  for (int64_t v : {int64_t{-1}, int64_t{300}}) b->mutable_contents()->add_int64_contents(v);
  request.add_outputs()->set_name("y");
  const std::string typed = request.SerializeAsString();
  for (size_t n = 0; n <= typed.size(); ++n) {
    const absl::Status s = InferLikeProtobuf(typed.substr(0, n));
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
  }
  request.mutable_inputs(0)->clear_contents();
  request.mutable_inputs(1)->clear_contents();
  request.add_raw_input_contents("0123456789ab");
  request.add_raw_input_contents("cd");
  const std::string raw = request.SerializeAsString();
  for (size_t n = 0; n <= raw.size(); ++n) {
    const absl::Status s = InferLikeProtobuf(raw.substr(0, n));
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
  }
}

TEST_F(WireRequestTest, InferRandomMutations) {
  int accepted = 0, refused = 0;
  for (int i = 0; i < 5000; ++i) {
    inference::ModelInferRequest request = RandomInfer();
    for (auto& raw : *request.mutable_raw_input_contents()) raw.resize(raw.size() % 9);
    for (auto& input : *request.mutable_inputs()) {
      auto* contents = input.mutable_contents();
      contents->mutable_fp32_contents()->Truncate(std::min(contents->fp32_contents_size(), 3));
      contents->mutable_int64_contents()->Truncate(std::min(contents->int64_contents_size(), 3));
    }
    std::string bytes = request.SerializeAsString();
    for (int m = 1 + rng_() % 3; m > 0; --m) bytes = Mutated(bytes);
    const absl::Status s = InferLikeProtobuf(bytes);
    ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
    ++(s.ok() ? accepted : refused);
  }
  // Both sides of the comparison were exercised.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace replicad
