#include "core/backends/cpu/kernels/weight_cache.h"

#include "gtest/gtest.h"

namespace replicad {
namespace {

using dnnl::memory;

// Plans for different slice sizes ask for the same weights in the same
// layout: one reorder, one copy.
TEST(WeightCacheTest, SameTensorAndLayoutShareOneReorderedCopy) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  WeightCache cache(engine);
  Tensor w = Tensor::Host(DType::kFloat32, {32, 16, 3, 3});
  for (int64_t i = 0; i < w.num_elements(); ++i) w.data<float>()[i] = static_cast<float>(i % 97);
  const memory::desc plain({32, 16, 3, 3}, memory::data_type::f32, memory::format_tag::oihw);
  const memory::desc blocked({32, 16, 3, 3}, memory::data_type::f32,
                             memory::format_tag::OIhw16i16o);
  dnnl::memory first = cache.Get(w, plain, blocked);
  dnnl::memory second = cache.Get(w, plain, blocked);
  EXPECT_EQ(first.get_data_handle(), second.get_data_handle());
  EXPECT_EQ(cache.size(), 1u);

  // Another layout of the same tensor is another entry.
  const memory::desc other({32, 16, 3, 3}, memory::data_type::f32, memory::format_tag::ohwi);
  EXPECT_NE(cache.Get(w, plain, other).get_data_handle(), first.get_data_handle());
  EXPECT_EQ(cache.size(), 2u);

  // The blocked copy holds the same values: reorder it back and compare.
  Tensor back = Tensor::Host(DType::kFloat32, {32, 16, 3, 3});
  dnnl::memory back_memory(plain, engine, back.raw_data());
  dnnl::stream stream(engine);
  dnnl::reorder(first, back_memory).execute(stream, first, back_memory);
  stream.wait();
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    ASSERT_EQ(back.data<float>()[i], w.data<float>()[i]) << i;
  }
}

TEST(WeightCacheTest, DescriptorsRoundTripThroughBytes) {
  const memory::desc blocked({2, 32, 7, 7}, memory::data_type::f32, memory::format_tag::nChw16c);
  std::optional<memory::desc> back = DeserializeDesc(SerializeDesc(blocked));
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(*back == blocked);
  EXPECT_FALSE(DeserializeDesc("not a descriptor").has_value());
}

}  // namespace
}  // namespace replicad
