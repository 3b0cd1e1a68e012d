#include "core/backends/cpu/kernels/weight_cache.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

using dnnl::memory;

const memory::desc kPlain({32, 16, 3, 3}, memory::data_type::f32, memory::format_tag::oihw);
const memory::desc kBlocked({32, 16, 3, 3}, memory::data_type::f32, memory::format_tag::OIhw16i16o);

// `copy` (in kBlocked) reordered back to row-major.
std::vector<float> RowMajor(const dnnl::engine& engine, const dnnl::memory& copy) {
  std::vector<float> back(32 * 16 * 3 * 3);
  dnnl::memory back_memory(kPlain, engine, back.data());
  dnnl::stream stream(engine);
  dnnl::reorder(copy, back_memory).execute(stream, const_cast<dnnl::memory&>(copy), back_memory);
  stream.wait();
  return back;
}

// Plans for different slice sizes, and other slots, ask for the same weights
// in the same layout: one reorder, one copy.
TEST(WeightCacheTest, SameTensorAndLayoutShareOneReorderedCopy) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  WeightCache cache(engine);
  Tensor w = Tensor::Host(DType::kFloat32, {32, 16, 3, 3});
  for (int64_t i = 0; i < w.num_elements(); ++i) w.data<float>()[i] = static_cast<float>(i % 97);
  std::shared_ptr<const dnnl::memory> first = cache.Get(w, kPlain, kBlocked);
  std::shared_ptr<const dnnl::memory> second = cache.Get(w, kPlain, kBlocked);
  EXPECT_EQ(first->get_data_handle(), second->get_data_handle());
  EXPECT_EQ(cache.size(), 1u);

  // Another layout of the same tensor is another entry.
  const memory::desc other({32, 16, 3, 3}, memory::data_type::f32, memory::format_tag::ohwi);
  std::shared_ptr<const dnnl::memory> third = cache.Get(w, kPlain, other);
  EXPECT_NE(third->get_data_handle(), first->get_data_handle());
  EXPECT_EQ(cache.size(), 2u);

  // The blocked copy holds the same values.
  const std::vector<float> back = RowMajor(engine, *first);
  for (int64_t i = 0; i < w.num_elements(); ++i) ASSERT_EQ(back[i], w.data<float>()[i]) << i;
}

// An evicted plan or an unloaded model must not leave its copies behind.
TEST(WeightCacheTest, ACopyGoesWithTheLastKernelThatHoldsIt) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  WeightCache cache(engine);
  Tensor w = Tensor::Host(DType::kFloat32, {32, 16, 3, 3});
  std::shared_ptr<const dnnl::memory> first = cache.Get(w, kPlain, kBlocked);
  std::shared_ptr<const dnnl::memory> second = cache.Get(w, kPlain, kBlocked);
  first.reset();
  EXPECT_EQ(cache.size(), 1u);
  second.reset();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_NE(cache.Get(w, kPlain, kBlocked), nullptr);
}

// The cache keys a copy by its tensor's address, so while a kernel holds the
// copy the tensor's bytes must not be freed (a later tensor could get the
// address); once the last holder goes, they are.
TEST(WeightCacheTest, ACopyKeepsItsTensorsBytesUntilItsLastHolderGoes) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  WeightCache cache(engine);
  std::vector<float> storage(32 * 16 * 3 * 3, 1.0f);
  bool released = false;
  auto buffer =
      std::make_shared<Buffer>(storage.data(), storage.size() * sizeof(float), MemoryLocation{},
                               Buffer::Release([&](void*) { released = true; }));
  std::optional<Tensor> tensor = *Tensor::Create(DType::kFloat32, {32, 16, 3, 3}, buffer);
  buffer.reset();
  std::shared_ptr<const dnnl::memory> copy = cache.Get(*tensor, kPlain, kBlocked);
  tensor.reset();
  EXPECT_FALSE(released);
  EXPECT_EQ(RowMajor(engine, *copy)[0], 1.0f);
  copy.reset();
  EXPECT_TRUE(released);
  EXPECT_EQ(cache.size(), 0u);
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
