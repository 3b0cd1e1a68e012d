#ifndef REPLICAD_TESTS_TESTING_PROTO_TENSORS_H_
#define REPLICAD_TESTS_TESTING_PROTO_TENSORS_H_

#include <algorithm>
#include <cstring>
#include <string>

#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "replicad/v1/replicad.pb.h"

namespace replicad::testing {

// Host tensors to and from the API's v1.Tensor, for tests that talk to the daemon.
inline v1::Tensor ToProto(const std::string& name, const Tensor& t) {
  v1::Tensor p;
  p.set_name(name);
  p.set_dtype(t.dtype() == DType::kFloat32 ? v1::DATA_TYPE_FLOAT32 : v1::DATA_TYPE_INT64);
  for (int64_t d : t.shape()) p.add_shape(d);
  p.set_raw(t.raw_data(), t.byte_size());
  return p;
}

inline Tensor FromProto(const v1::Tensor& p) {
  Tensor t = Tensor::Host(p.dtype() == v1::DATA_TYPE_FLOAT32 ? DType::kFloat32 : DType::kInt64,
                          Shape(p.shape().begin(), p.shape().end()));
  EXPECT_EQ(p.raw().size(), t.byte_size());
  std::memcpy(t.raw_data(), p.raw().data(), std::min(p.raw().size(), t.byte_size()));
  return t;
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_PROTO_TENSORS_H_
