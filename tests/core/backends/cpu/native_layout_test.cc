// Kernels given inputs in the layouts their producers kept (channels-last and
// 16-channel blocks, oneDNN's choices for convolutions) and asked to keep
// their output's: each must compute what it computes on row-major data,
// whether it reads the layout in place or reorders it first.
//
// Cases: Mul and Add (channel scales, two native operands), GlobalAveragePool, MaxPool,
// AveragePool, Conv with computed weights, Relu and Concat given inputs in channels-last and
// 16-channel blocks (20 channels, which pad a block, and 32), with and without a native output,
// equal the row-major kernels' results; a fused SiLU applied after the fused sum; a batch-1
// depthwise convolution of 72 channels run as two primitives (oneDNN's verbose lines show both)
// equals the whole one; a MaxPool of bfloat16 values (a bf16 chain's) keeps them, and their
// NaNs; SameBytes on unit spatial dims; JoinedOffsets only where every source is one contiguous
// block of the output.

#include "core/backends/cpu/kernels/native_layout.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using dnnl::memory;

class NativeLayoutTest : public CpuKernelTestBase,
                         public ::testing::WithParamInterface<memory::format_tag> {
 protected:
  memory::desc Layout(const Shape& shape, memory::format_tag tag) const {
    return memory::desc(memory::dims(shape.begin(), shape.end()), memory::data_type::f32, tag);
  }

  // `t`'s bytes in `layout`.
  std::vector<char> InLayout(const Tensor& t, const memory::desc& layout) {
    std::vector<char> bytes(layout.get_size());
    memory from(Layout(t.shape(), memory::format_tag::abcd), engine_, t.raw_data());
    memory to(layout, engine_, bytes.data());
    dnnl::stream stream(engine_);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    return bytes;
  }

  // Row-major copy of `bytes`, laid out as `layout` describes.
  Tensor RowMajor(const std::vector<char>& bytes, const memory::desc& layout, const Shape& shape) {
    Tensor t = Tensor::Host(DType::kFloat32, shape);
    memory from(layout, engine_, const_cast<char*>(bytes.data()));
    memory to(Layout(shape, memory::format_tag::abcd), engine_, t.raw_data());
    dnnl::stream stream(engine_);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    return t;
  }

  // Runs `op_type` with the inputs listed in `native` arriving in `tag`'s
  // layout and, with `native_output`, its output kept in the layout the
  // kernel reports; returns the output in row-major.
  Tensor RunNative(const std::string& op_type, const std::vector<Tensor>& inputs,
                   const std::vector<int>& native, bool native_output, const Attributes& attributes,
                   std::vector<int> constants = {}) {
    KernelSpec spec;
    spec.op_type = op_type;
    spec.node_name = "k1";
    spec.attributes = &attributes;
    spec.native_output = native_output;
    spec.input_layouts.assign(inputs.size(), "");
    std::vector<std::vector<char>> native_bytes(inputs.size());
    std::vector<const void*> data;
    for (size_t i = 0; i < inputs.size(); ++i) {
      spec.inputs.push_back(inputs[i].type());
      const bool constant = std::find(constants.begin(), constants.end(), i) != constants.end();
      spec.constant_inputs.push_back(constant ? &inputs[i] : nullptr);
      if (std::find(native.begin(), native.end(), i) != native.end()) {
        const memory::desc layout = Layout(inputs[i].shape(), GetParam());
        native_bytes[i] = InLayout(inputs[i], layout);
        spec.input_layouts[i] = SerializeDesc(layout);
        data.push_back(native_bytes[i].data());
      } else {
        data.push_back(inputs[i].raw_data());
      }
    }
    EXPECT_TRUE(FindOp(op_type)->infer(&spec).ok());
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    if (!kernel.ok()) return Tensor();
    std::vector<char> workspace((*kernel)->workspace_bytes() + 64);
    (*kernel)->SetWorkspace(workspace.data());
    const Shape& shape = spec.outputs[0].shape;
    const std::string layout = native_output ? (*kernel)->native_output_layout() : "";
    std::optional<memory::desc> out_layout = DeserializeDesc(layout);
    std::vector<char> out(out_layout
                              ? std::max(out_layout->get_size(), (*kernel)->native_output_bytes())
                              : NumElements(shape) * sizeof(float));
    void* outputs[] = {out.data()};
    const absl::Status ran = (*kernel)->Run(RunContext{}, data.data(), outputs);
    EXPECT_TRUE(ran.ok()) << ran;
    if (!out_layout) {
      Tensor t = Tensor::Host(DType::kFloat32, shape);
      std::memcpy(t.raw_data(), out.data(), t.byte_size());
      return t;
    }
    return RowMajor(out, *out_layout, shape);
  }

  // The same node on row-major inputs.
  Tensor RunRowMajor(const std::string& op_type, const std::vector<Tensor>& inputs,
                     const Attributes& attributes, std::vector<int> constants = {}) {
    std::vector<std::optional<Tensor>> given(inputs.begin(), inputs.end());
    absl::StatusOr<std::vector<Tensor>> y = Run(op_type, given, attributes, 17, constants);
    EXPECT_TRUE(y.ok()) << y.status();
    return y.ok() ? (*y)[0] : Tensor();
  }
};

// 20 channels: not a multiple of 16, so blocked layouts pad them.
TEST_P(NativeLayoutTest, ChannelScaleReadsAndKeepsTheLayout) {
  const Tensor x = Random({3, 20, 5, 6}, 1), scale = Random({3, 20, 1, 1}, 2);
  const Attributes none;
  const Tensor expected = RunRowMajor("Mul", {x, scale}, none);
  for (bool native_output : {false, true}) {
    ExpectNear(RunNative("Mul", {x, scale}, {0}, native_output, none), expected);
    ExpectNear(RunNative("Mul", {scale, x}, {1}, native_output, none), expected);
  }
}

TEST_P(NativeLayoutTest, AddOfTwoNativeOperandsAndOfOneWithRowMajor) {
  const Tensor a = Random({2, 20, 4, 3}, 3), b = Random({2, 20, 4, 3}, 4);
  const Attributes none;
  const Tensor expected = RunRowMajor("Add", {a, b}, none);
  for (bool native_output : {false, true}) {
    ExpectNear(RunNative("Add", {a, b}, {0, 1}, native_output, none), expected);
    ExpectNear(RunNative("Add", {a, b}, {1}, native_output, none), expected);
  }
}

// 20 channels pad a 16-channel block, 32 fill two (then the pooled [N, C, 1, 1]
// is row-major byte for byte and written in place).
TEST_P(NativeLayoutTest, GlobalAveragePoolReadsTheLayout) {
  const Attributes none;
  for (int64_t channels : {20, 32}) {
    const Tensor x = Random({3, channels, 7, 5}, 5), unit = Random({2, channels, 1, 1}, 6);
    ExpectNear(RunNative("GlobalAveragePool", {x}, {0}, false, none),
               RunRowMajor("GlobalAveragePool", {x}, none));
    ExpectNear(RunNative("GlobalAveragePool", {unit}, {0}, false, none), unit);
  }
}

TEST_P(NativeLayoutTest, PoolingsReadAndKeepTheLayout) {
  const Tensor x = Random({2, 32, 7, 6}, 9);
  Attributes window;
  window.Set("kernel_shape", std::vector<int64_t>{3, 2});
  window.Set("strides", std::vector<int64_t>{2, 2});
  window.Set("pads", std::vector<int64_t>{1, 0, 1, 1});
  for (const char* op : {"MaxPool", "AveragePool"}) {
    for (bool native_output : {false, true}) {
      ExpectNear(RunNative(op, {x}, {0}, native_output, window), RunRowMajor(op, {x}, window));
    }
  }
}

// A bf16 chain's values (compute_precision.h: a MaxPool between two bf16
// convolutions): X arrives in bfloat16, the pool keeps bfloat16 where its
// output stays native (float32 row-major otherwise), and a window holding a
// NaN gives NaN, as the float32 kernel gives on the same values widened.
TEST_P(NativeLayoutTest, MaxPoolOfBFloat16ValuesKeepsThemAndTheirNaNs) {
  Tensor x = Random({2, 20, 7, 6}, 12);
  x.data<float>()[8] = std::nanf("");
  x.data<float>()[7 * 6 * 20 + 13] = std::nanf("");
  const memory::dims dims = {2, 20, 7, 6};
  const memory::desc row_major(dims, memory::data_type::f32, memory::format_tag::abcd);
  const memory::desc bf16(dims, memory::data_type::bf16, GetParam());
  dnnl::stream stream(engine_);
  std::vector<char> bf16_bytes(bf16.get_size());
  {
    memory from(row_major, engine_, x.raw_data()), to(bf16, engine_, bf16_bytes.data());
    dnnl::reorder(from, to).execute(stream, from, to);
  }
  Tensor widened = Tensor::Host(DType::kFloat32, {2, 20, 7, 6});  // x's bfloat16 values.
  {
    memory from(bf16, engine_, bf16_bytes.data()), to(row_major, engine_, widened.raw_data());
    dnnl::reorder(from, to).execute(stream, from, to);
  }
  stream.wait();
  Attributes window;
  window.Set("kernel_shape", std::vector<int64_t>{3, 3});
  window.Set("strides", std::vector<int64_t>{2, 2});
  window.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  const Tensor expected = RunRowMajor("MaxPool", {widened}, window);
  for (bool native_output : {false, true}) {
    SCOPED_TRACE(native_output ? "native output" : "row-major output");
    KernelSpec spec;
    spec.op_type = "MaxPool";
    spec.node_name = "pool";
    spec.attributes = &window;
    spec.native_output = native_output;
    spec.inputs = {x.type()};
    spec.constant_inputs = {nullptr};
    spec.input_layouts = {SerializeDesc(bf16)};
    ASSERT_TRUE(FindOp("MaxPool")->infer(&spec).ok());
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    std::vector<char> workspace((*kernel)->workspace_bytes() + 64);
    (*kernel)->SetWorkspace(workspace.data());
    const std::optional<memory::desc> out_layout =
        native_output ? DeserializeDesc((*kernel)->native_output_layout()) : std::nullopt;
    if (native_output) {
      ASSERT_TRUE(out_layout.has_value());
      EXPECT_EQ(out_layout->data_type(), memory::data_type::bf16);
    }
    Tensor y = Tensor::Host(DType::kFloat32, spec.outputs[0].shape);
    std::vector<char> out(out_layout ? out_layout->get_size() : y.byte_size());
    const void* inputs[] = {bf16_bytes.data()};
    void* outputs[] = {out.data()};
    ASSERT_TRUE((*kernel)->Run(RunContext{}, inputs, outputs).ok());
    if (out_layout) {
      const memory::dims y_dims(y.shape().begin(), y.shape().end());
      memory from(*out_layout, engine_, out.data());
      memory to(memory::desc(y_dims, memory::data_type::f32, memory::format_tag::abcd), engine_,
                y.raw_data());
      dnnl::reorder(from, to).execute(stream, from, to);
      stream.wait();
    } else {
      std::memcpy(y.raw_data(), out.data(), y.byte_size());
    }
    int nans = 0;
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      const float got = y.data<float>()[i], want = expected.data<float>()[i];
      nans += std::isnan(want);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "element " << i;
      } else {
        EXPECT_EQ(got, want) << "element " << i;  // A max picks one of its inputs.
      }
    }
    EXPECT_GT(nans, 0);
  }
}

TEST(SameBytesTest, ChannelsLastAndBlocksOfUnitSpatialDims) {
  const auto desc = [](memory::dims dims, memory::format_tag tag) {
    return memory::desc(dims, memory::data_type::f32, tag);
  };
  using tag = memory::format_tag;
  EXPECT_TRUE(SameBytes(desc({4, 32, 1, 1}, tag::acdb), desc({4, 32, 1, 1}, tag::abcd)));
  EXPECT_TRUE(SameBytes(desc({4, 32, 1, 1}, tag::aBcd16b), desc({4, 32, 1, 1}, tag::abcd)));
  EXPECT_FALSE(SameBytes(desc({4, 20, 1, 1}, tag::aBcd16b), desc({4, 20, 1, 1}, tag::abcd)));
  EXPECT_FALSE(SameBytes(desc({4, 32, 2, 1}, tag::aBcd16b), desc({4, 32, 2, 1}, tag::abcd)));
  EXPECT_FALSE(SameBytes(desc({4, 32, 2, 1}, tag::acdb), desc({4, 32, 2, 1}, tag::abcd)));
  EXPECT_TRUE(SameBytes(desc({1, 32, 2, 2}, tag::aBcd16b), desc({1, 32, 2, 2}, tag::aBcd16b)));
}

// A concatenation along channels is its sources back to back only where
// each source is one contiguous block of the output: row-major or blocked
// channels at batch 1, the blocks filled; never channels-last (channels are
// innermost) or a batch of several images.
TEST(JoinedOffsetsTest, BackToBackOnlyWhereEverySourceIsOneBlock) {
  const auto desc = [](memory::dims dims, memory::format_tag tag) {
    return memory::desc(dims, memory::data_type::f32, tag);
  };
  using tag = memory::format_tag;
  EXPECT_EQ(JoinedOffsets({desc({1, 16, 3, 3}, tag::aBcd16b), desc({1, 32, 3, 3}, tag::aBcd16b)},
                          desc({1, 48, 3, 3}, tag::aBcd16b), 1),
            (std::vector<size_t>{0, 16 * 9 * 4}));
  EXPECT_EQ(JoinedOffsets({desc({1, 3, 2, 2}, tag::abcd), desc({1, 5, 2, 2}, tag::abcd)},
                          desc({1, 8, 2, 2}, tag::abcd), 1),
            (std::vector<size_t>{0, 3 * 4 * 4}));
  // Batch 2: each source is two blocks of the output.
  EXPECT_TRUE(JoinedOffsets({desc({2, 16, 3, 3}, tag::aBcd16b), desc({2, 16, 3, 3}, tag::aBcd16b)},
                            desc({2, 32, 3, 3}, tag::aBcd16b), 1)
                  .empty());
  // A source of 8 channels leaves half its block as padding.
  EXPECT_TRUE(JoinedOffsets({desc({1, 8, 3, 3}, tag::aBcd16b), desc({1, 24, 3, 3}, tag::aBcd16b)},
                            desc({1, 32, 3, 3}, tag::aBcd16b), 1)
                  .empty());
  EXPECT_TRUE(JoinedOffsets({desc({1, 16, 3, 3}, tag::acdb), desc({1, 16, 3, 3}, tag::acdb)},
                            desc({1, 32, 3, 3}, tag::acdb), 1)
                  .empty());
  // Layouts that differ, and a join along another axis.
  EXPECT_TRUE(JoinedOffsets({desc({1, 16, 3, 3}, tag::abcd), desc({1, 16, 3, 3}, tag::aBcd16b)},
                            desc({1, 32, 3, 3}, tag::aBcd16b), 1)
                  .empty());
  EXPECT_TRUE(JoinedOffsets({desc({1, 16, 3, 3}, tag::abcd), desc({1, 16, 3, 3}, tag::abcd)},
                            desc({1, 16, 6, 3}, tag::abcd), 2)
                  .empty());
}

TEST_P(NativeLayoutTest, ConvWithComputedWeightsAndOtherOpsReorderFirst) {
  const Tensor x = Random({2, 20, 5, 5}, 7), w = Random({4, 20, 3, 3}, 8);
  const Attributes none;
  ExpectNear(RunNative("Conv", {x, w}, {0}, false, none), RunRowMajor("Conv", {x, w}, none));
  ExpectNear(RunNative("Conv", {x, w}, {0}, true, none, {1}),
             RunRowMajor("Conv", {x, w}, none, {1}));
  ExpectNear(RunNative("Relu", {x}, {0}, false, none), RunRowMajor("Relu", {x}, none));
  Attributes axis;
  axis.Set("axis", int64_t{1});
  ExpectNear(RunNative("Concat", {x, x}, {1}, false, axis), RunRowMajor("Concat", {x, x}, axis));
}

// ReduceMean over the spatial dims (x.mean([2, 3]) in torchvision's mnasnet
// and shufflenet) is a global average pooling of the layout as it lies;
// over the channels it reorders first.
TEST_P(NativeLayoutTest, ReduceMeanOverSpatialDimsReadsTheLayout) {
  for (int64_t channels : {32, 20}) {
    const Tensor x = Random({3, channels, 4, 5}, 13);
    for (int64_t keepdims : {0, 1}) {
      for (const std::vector<int64_t>& axes :
           {std::vector<int64_t>{2, 3}, std::vector<int64_t>{-1, -2}, std::vector<int64_t>{1}}) {
        Attributes reduce;
        reduce.Set("axes", axes);
        reduce.Set("keepdims", keepdims);
        SCOPED_TRACE(::testing::Message() << channels << " channels, keepdims " << keepdims
                                          << ", axes " << axes[0] << "...");
        ExpectNear(RunNative("ReduceMean", {x}, {0}, false, reduce),
                   RunRowMajor("ReduceMean", {x}, reduce));
      }
    }
  }
}

// A 1x1 convolution's inputs with the addend of a fused residual Add:
// {X, W, bias, addend}, `channels` out of 16.
std::vector<Tensor> ResidualConvInputs(int64_t channels, uint32_t seed) {
  return {Random({2, 16, 5, 4}, seed), Random({channels, 16, 1, 1}, seed + 1),
          Random({channels}, seed + 2), Random({2, channels, 5, 4}, seed + 3)};
}

// A residual block's input reaches the fused Add of its last convolution
// (input 3) in the layout its producer kept: copied byte for byte where the
// convolution writes that layout (32 output channels fill 16-channel
// blocks), reordered otherwise (channels-last, and the 20 padded channels).
TEST_P(NativeLayoutTest, FusedResidualAddendInAnyLayout) {
  for (int64_t channels : {32, 20}) {
    const std::vector<Tensor> inputs = ResidualConvInputs(channels, 9);
    Attributes fused;
    fused.Set(kFusedSum, int64_t{1});
    fused.Set(kFusedActivation, std::string("Relu"));
    const Tensor expected = RunRowMajor("Conv", inputs, fused, {1, 2});
    for (bool native_output : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << channels << " channels, native output " << native_output);
      ExpectNear(RunNative("Conv", inputs, {3}, native_output, fused, {1, 2}), expected);
      ExpectNear(RunNative("Conv", inputs, {0, 3}, native_output, fused, {1, 2}), expected);
    }
  }
}

// A fused SiLU (Swish with alpha 1) runs after the convolution and its fused
// sum as a pass over the buffer the convolution wrote: its own (reordered
// out after) or the output kept in its layout, padded channels included
// (20).
TEST_P(NativeLayoutTest, FusedSiluAppliesAfterTheSum) {
  for (int64_t channels : {32, 20}) {
    const std::vector<Tensor> inputs = ResidualConvInputs(channels, 16);
    Attributes sum_only;
    sum_only.Set(kFusedSum, int64_t{1});
    Tensor expected = RunRowMajor("Conv", inputs, sum_only, {1, 2});
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      const double v = expected.data<float>()[i];
      expected.data<float>()[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
    }
    Attributes silu = sum_only;
    WriteFusedActivation(FusedActivation{"Swish", 1.0f, 0.0f}, &silu);
    for (bool native_output : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << channels << " channels, native output " << native_output);
      ExpectNear(RunNative("Conv", inputs, {0, 3}, native_output, silu, {1, 2}), expected);
    }
    ExpectNear(RunRowMajor("Conv", inputs, silu, {1, 2}), expected);
  }
}

// A batch-1 depthwise convolution whose 16-channel blocks do not come in
// fours runs on a slot of 2 threads as two primitives (depthwise_parts.h),
// each on its range of the whole's buffers: X read in place or reordered
// into the kernel's buffer, Y kept or reordered out. It must compute what
// the convolution run whole (on one thread) computes.
TEST_P(NativeLayoutTest, DepthwiseBatchOneRunsAsChannelParts) {
  const Tensor x = Random({1, 72, 56, 56}, 13), w = Random({72, 1, 3, 3}, 14),
               bias = Random({72}, 15);
  Attributes attributes;
  attributes.Set("group", int64_t{72});
  attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  attributes.Set(kFusedActivation, std::string("Relu"));
  // The parts are cut for oneDNN's AVX-512 kernel only; elsewhere it runs whole.
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const bool avx512 = isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
                      isa == dnnl::cpu_isa::avx512_core_bf16 ||
                      isa == dnnl::cpu_isa::avx512_core_amx;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor expected = RunRowMajor("Conv", {x, w, bias}, attributes, {1, 2});
  omp_set_num_threads(2);
  for (bool native_output : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "native output " << native_output);
    // oneDNN's verbose lines name each primitive's shape: two parts ran.
    dnnl::set_verbose(1);
    ::testing::internal::CaptureStdout();
    const Tensor native = RunNative("Conv", {x, w, bias}, {0}, native_output, attributes, {1, 2});
    const Tensor row_major = RunRowMajor("Conv", {x, w, bias}, attributes, {1, 2});
    const std::string verbose = ::testing::internal::GetCapturedStdout();
    dnnl::set_verbose(0);
    if (avx512) {
      EXPECT_THAT(verbose, ::testing::HasSubstr("jit_dw:avx512_core,forward_inference"));
      EXPECT_THAT(verbose, ::testing::HasSubstr("g64mb1_ic64oc64_ih56"));
      EXPECT_THAT(verbose, ::testing::HasSubstr("g8mb1_ic8oc8_ih56"));
    }
    ExpectNear(native, expected);
    ExpectNear(row_major, expected);
  }
  omp_set_num_threads(threads);
}

INSTANTIATE_TEST_SUITE_P(Layouts, NativeLayoutTest,
                         ::testing::Values(memory::format_tag::acdb, memory::format_tag::aBcd16b),
                         [](const ::testing::TestParamInfo<memory::format_tag>& info) {
                           return std::string(info.param == memory::format_tag::acdb
                                                  ? "ChannelsLast"
                                                  : "Blocked16");
                         });

}  // namespace
}  // namespace replicad
