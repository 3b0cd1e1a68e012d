#include "core/model/onnx_import.h"

#include "absl/strings/str_cat.h"
#include "core/model/default_model.h"
#include "core/model/onnx_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(OnnxImportTest, DefaultModelHasItsSignatureAndWeights) {
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadDefaultModel();
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->inputs().size(), 1u);
  EXPECT_EQ((*model)->inputs()[0].name, "image");
  EXPECT_EQ((*model)->inputs()[0].type.shape, (Shape{kAnyDim, 1, 28, 28}));
  ASSERT_EQ((*model)->outputs().size(), 2u);
  EXPECT_EQ((*model)->outputs()[1].name, "probabilities");
  EXPECT_EQ((*model)->graph().initializers.size(), 8u);  // 2 convolutions, 2 Gemms.
  EXPECT_EQ((*model)->graph().opset, 13);
  // Deterministic: the same bytes every time.
  EXPECT_EQ(DefaultModelOnnxBytes(), DefaultModelOnnxBytes());
}

TEST(OnnxImportTest, UnsupportedOperatorsAreAllNamedWithTheirNodes) {
  OnnxModelBuilder b("lstm_and_friends");
  b.AddNode("Relu", {"x"}, {"a"});
  b.AddNode("Shrink", {"a"}, {"b"});
  b.AddNode("ThresholdedRelu", {"b"}, {"c"});
  b.AddNode("Shrink", {"c"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("m.onnx"), HasSubstr("Shrink (node 'b')"),
                    HasSubstr("ThresholdedRelu (node 'c')"), HasSubstr("Shrink (node 'y')")));
}

TEST(OnnxImportTest, OlderOpsetIsAcceptedWhereItsOperatorsAreUnchangedSinceEleven) {
  OnnxModelBuilder b("old", 1);
  b.AddNode("GlobalAveragePool", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2, 3, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2, 1, 1});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  EXPECT_TRUE(model.ok()) << model.status();
}

// Optional outputs a model leaves unnamed ("") are values of their own:
// two nodes' unnamed Means must not be one value that both write.
TEST(OnnxImportTest, UnnamedOutputsAreDistinctValues) {
  OnnxModelBuilder b("layer_norms", 17);
  b.AddInitializer("scale", Tensor::Host(DType::kFloat32, {3}));
  b.AddNode("LayerNormalization", {"x", "scale"}, {"h", "", "h_inv"});
  b.AddNode("LayerNormalization", {"h", "scale"}, {"y", "", "y_inv"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("h_inv", DType::kFloat32, {kAnyDim, 1});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<Node>& nodes = (*model)->graph().nodes;
  ASSERT_EQ(nodes.size(), 2u);
  ASSERT_EQ(nodes[0].outputs.size(), 3u);
  ASSERT_EQ(nodes[1].outputs.size(), 3u);
  EXPECT_NE(nodes[0].outputs[1], nodes[1].outputs[1]);
}

TEST(OnnxImportTest, OlderOpsetsAreConvertedToOpsetEleven) {
  OnnxModelBuilder b("old", 9);
  b.AddNode("Softmax", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->graph().opset, 11);
}

// Found by fuzz/onnx_import_fuzzer: ONNX's version converter crashed on a
// graph output that no node produces, which its checker lets through.
TEST(OnnxImportTest, OlderOpsetWithAnOutputNoNodeProducesIsRefused) {
  OnnxModelBuilder b("old", 4);
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("yy", DType::kFloat32, {kAnyDim, 4});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("m.onnx"), HasSubstr("output 'yy' is produced by no node")));
}

// Found by fuzz/onnx_import_fuzzer: a zero stride killed the process with
// SIGFPE inside ONNX's shape inference.
TEST(OnnxImportTest, ZeroStridesAndDilationsAreRefusedBeforeOnnxSeesThem) {
  for (const char* attribute : {"strides", "dilations"}) {
    OnnxModelBuilder b("pool");
    onnx::NodeProto* pool = b.AddNode("MaxPool", {"x"}, {"y"});
    OnnxModelBuilder::SetInts(pool, "kernel_shape", {2, 2});
    OnnxModelBuilder::SetInts(pool, attribute, {2, 0});
    b.AddInput("x", DType::kFloat32, {kAnyDim, 1, 4, 4});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, 1, 2, 2});
    absl::StatusOr<std::shared_ptr<const Model>> model =
        LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << attribute;
    EXPECT_THAT(model.status().message(),
                AllOf(HasSubstr("m.onnx"), HasSubstr("node 'y' (MaxPool)"),
                      HasSubstr(absl::StrCat("attribute ", attribute,
                                             " expected positive values, received [2, 0]"))));
  }
}

// Found by a hostile probe: a 1-D Conv (X [N, C, L]) with a W of rank 4 and
// no kernel_shape killed the process with SIGSEGV inside ONNX's shape
// inference, which reads as many kernel dims from W as X has spatial dims.
TEST(OnnxImportTest, ConvWeightsOfAnotherRankThanTheInputAreRefusedBeforeOnnxSeesThem) {
  for (const char* op : {"Conv", "ConvTranspose"}) {
    OnnxModelBuilder b("conv");
    b.AddInitializer("w", Tensor::Host(DType::kFloat32, {2, 2, 3, 3}));
    b.AddNode(op, {"x", "w"}, {"y"});
    b.AddInput("x", DType::kFloat32, {1, 2, 8});
    b.AddOutput("y", DType::kFloat32, {1, 2, 6});
    absl::StatusOr<std::shared_ptr<const Model>> model =
        LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << op;
    EXPECT_THAT(model.status().message(),
                AllOf(HasSubstr("m.onnx"), HasSubstr(absl::StrCat("node 'y' (", op, ")")),
                      HasSubstr("input 1 'W' must have the rank of input 0 'X' (3), received "
                                "rank 4")));
  }
}

// Found by fuzz/onnx_import_fuzzer: ONNX's Gemm adapter (opset 6 to 7) read
// dim 0 of a rank-0 B out of range; so did Gemm's shape inference at opset 6.
TEST(OnnxImportTest, OldGemmWithoutMatricesIsRefusedBeforeConversion) {
  for (int opset : {4, 6}) {
    auto old_gemm = [opset](Shape w_shape) {
      OnnxModelBuilder b("old_gemm", opset);
      b.AddInitializer("W", Tensor::Host(DType::kFloat32, std::move(w_shape)));
      b.AddInitializer("C", Tensor::Host(DType::kFloat32, {3}));
      OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"x", "W", "C"}, {"y"}), "transB", 1);
      b.AddInput("x", DType::kFloat32, {1, 4});
      b.AddOutput("y", DType::kFloat32, {1, 3});
      return LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
    };
    for (Shape bad : {Shape{}, Shape{4}}) {
      absl::StatusOr<std::shared_ptr<const Model>> model = old_gemm(bad);
      EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << opset;
      EXPECT_THAT(
          model.status().message(),
          AllOf(HasSubstr("m.onnx"), HasSubstr("node 'y' (Gemm): input 'W' expected a matrix"),
                HasSubstr(absl::StrCat("converting opset ", opset, " to 11")),
                HasSubstr(absl::StrCat("received rank ", bad.size()))));
    }
    absl::StatusOr<std::shared_ptr<const Model>> model = old_gemm({3, 4});  // A matrix converts.
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->graph().opset, 11);
  }
}

// Found by fuzz/onnx_import_fuzzer: a model importing the default domain at
// 108 and at 6 reached ONNX's opset-6 Gemm shape inference unchecked.
TEST(OnnxImportTest, ADomainImportedTwiceIsRefused) {
  OnnxModelBuilder b("twice", 13);
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {1, 4});
  b.AddOutput("y", DType::kFloat32, {1, 4});
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(b.Serialize()));
  onnx::OperatorSetIdProto* again = proto.add_opset_import();
  again->set_domain("ai.onnx");
  again->set_version(6);
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxBytes(proto.SerializeAsString(), "m", "m.onnx");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              HasSubstr("opset_import lists domain 'ai.onnx' twice (versions 13 and 6)"));
}

// The same, where B's rank is known only once the nodes before the Gemm are
// inferred: a Reshape of the weights to a vector.
TEST(OnnxImportTest, OldGemmOfAnInferredVectorIsRefusedBeforeInference) {
  OnnxModelBuilder b("old_gemm_reshaped", 6);
  b.AddInitializer("W", Tensor::Host(DType::kFloat32, {3, 4}));
  Tensor flat = Tensor::Host(DType::kInt64, {1});
  flat.data<int64_t>()[0] = 12;
  b.AddInitializer("flat", std::move(flat));
  b.AddInitializer("C", Tensor::Host(DType::kFloat32, {3}));
  b.AddNode("Reshape", {"W", "flat"}, {"w_vector"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"x", "w_vector", "C"}, {"y"}), "transB", 1);
  b.AddInput("x", DType::kFloat32, {1, 4});
  b.AddOutput("y", DType::kFloat32, {1, 3});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("node 'y' (Gemm): input 'w_vector' expected a matrix"),
                    HasSubstr("received rank 1")));
}

// Found by fuzz/onnx_import_fuzzer: ONNX's shape inference wrote a
// Constant's 1 byte of INT64 raw_data through a null pointer.
TEST(OnnxImportTest, TensorsWhoseRawDataDisagreesWithTheirDimsAreRefused) {
  OnnxModelBuilder b("reshape");
  onnx::NodeProto* constant = b.AddNode("Constant", {}, {"shape"});
  onnx::AttributeProto* value = constant->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  value->mutable_t()->add_dims(41);
  value->mutable_t()->set_raw_data(std::string(1, '\1'));
  b.AddNode("Reshape", {"x", "shape"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 6});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 3, 2});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m.onnx");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr("m.onnx"), HasSubstr("node 'shape' attribute 'value'"),
                    HasSubstr("INT64 dims [41] expected 328 bytes of raw_data, received 1")));
}

// Found by fuzz/onnx_import_fuzzer: an initializer's dims were allocated
// (and zeroed) before its 72 bytes of data were compared with them.
TEST(OnnxImportTest, InitializerDimsBeyondItsDataAreRefusedBeforeAllocating) {
  struct Case {
    std::vector<int64_t> dims;
    bool raw;  // raw_data of 72 bytes, or float_data of 3 values.
    const char* message;
  };
  const Case cases[] = {
      {{1 << 20, 1 << 20, 4},
       true,
       "FLOAT dims [1048576, 1048576, 4] expected 17592186044416 bytes of raw_data, received 72"},
      // The product wraps to 2^40 in 64 bits (one that wraps to 0, ONNX's checker refuses).
      {{int64_t{1} << 40, (int64_t{1} << 40) + 1},
       true,
       "dims [1099511627776, 1099511627777] expected non-negative, with a byte size that fits"},
      {{1 << 20, 1 << 20, 4}, false, "needs 4398046511104 elements; received 3"},
  };
  for (const Case& c : cases) {
    OnnxModelBuilder b("huge");  // "w" is read by no node; it is checked all the same.
    b.AddNode("Relu", {"x"}, {"y"});
    b.AddInput("x", DType::kFloat32, {kAnyDim, 2});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
    onnx::ModelProto model = b.model();
    onnx::TensorProto* w = model.mutable_graph()->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : c.dims) w->add_dims(d);
    if (c.raw) {
      w->set_raw_data(std::string(72, '\0'));
    } else {
      for (float v : {1.0f, 2.0f, 3.0f}) w->add_float_data(v);
    }
    absl::StatusOr<std::shared_ptr<const Model>> loaded =
        LoadOnnxBytes(model.SerializeAsString(), "m", "m.onnx");
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(loaded.status().message(), AllOf(HasSubstr("'w'"), HasSubstr(c.message)));
  }
}

TEST(OnnxImportTest, OpsetsAboveSeventeenAreUnimplemented) {
  OnnxModelBuilder b("new", 18);
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(model.status().message(),
              HasSubstr("opset is 18; replicad supports opsets 11 to 17"));
}

TEST(OnnxImportTest, UnsupportedInputDtypeIsNamed) {
  OnnxModelBuilder b("f64");
  b.AddNode("Relu", {"x"}, {"y"});
  onnx::ModelProto model = b.model();
  auto* input = model.mutable_graph()->add_input();
  input->set_name("x");
  input->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::DOUBLE);
  input->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  auto* output = model.mutable_graph()->add_output();
  *output = *input;
  output->set_name("y");
  absl::StatusOr<std::shared_ptr<const Model>> loaded =
      LoadOnnxBytes(model.SerializeAsString(), "m", "m");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), AllOf(HasSubstr("input 'x'"), HasSubstr("DOUBLE (11)")));
}

TEST(OnnxImportTest, GarbageAndMissingFiles) {
  EXPECT_EQ(LoadOnnxBytes("not a model", "m", "junk.onnx").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadOnnxFile("/nonexistent/model.onnx", "m").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(OnnxImportTest, CheckerRejectsBrokenGraphs) {
  OnnxModelBuilder b("broken");
  b.AddNode("Relu", {"missing"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("ONNX rejects the model"));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// A 1-D convolution and pooling (X [N, C, L]) run as 2-D ones of height 1:
// Unsqueeze, the 2-D node, Squeeze. The weights keep their name and 1-D
// shape (checkpoints and gradients are the model's own), and the output
// keeps its name. The ONNX backend's 1-D cases check the values
// (onnx_node_conformance_test).
TEST(OnnxImportTest, OneDimensionalWindowsRunAsTwoDimensionalOnesOfHeightOne) {
  for (int opset : {11, 13}) {
    SCOPED_TRACE(opset);
    OnnxModelBuilder b("conv1d", opset);
    b.AddInitializer("w", Tensor::Host(DType::kFloat32, {4, 2, 3}));
    onnx::NodeProto* conv = b.AddNode("Conv", {"x", "w"}, {"h"});
    OnnxModelBuilder::SetInts(conv, "pads", {1, 1});
    onnx::NodeProto* pool = b.AddNode("MaxPool", {"h"}, {"y"});
    OnnxModelBuilder::SetInts(pool, "kernel_shape", {2});
    OnnxModelBuilder::SetInts(pool, "strides", {2});
    b.AddInput("x", DType::kFloat32, {kAnyDim, 2, 8});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, 4, 4});
    absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
    ASSERT_TRUE(model.ok()) << model.status();
    const Graph& graph = (*model)->graph();
    std::vector<std::string> ops;
    for (const Node& node : graph.nodes) ops.push_back(node.op_type);
    EXPECT_THAT(ops, ::testing::ElementsAre("Unsqueeze", "Unsqueeze", "Conv", "Squeeze",
                                            "Unsqueeze", "MaxPool", "Squeeze"));
    bool found_w = false;
    for (const auto& [v, tensor] : graph.initializers) {
      if (graph.values[v].name != "w") continue;
      found_w = true;
      EXPECT_THAT(tensor.shape(), ::testing::ElementsAre(4, 2, 3));
    }
    EXPECT_TRUE(found_w);
    EXPECT_EQ(graph.values[graph.outputs[0]].name, "y");
  }
}

}  // namespace
}  // namespace replicad
