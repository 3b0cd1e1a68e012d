#ifndef REPLICAD_CLIENT_NPY_H_
#define REPLICAD_CLIENT_NPY_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "replicad/v1/replicad.pb.h"

namespace replicad::client {

// NumPy .npy files <-> replicad.v1.Tensor (dtype, shape, raw; the name is left
// to the caller). Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
// Read: format versions 1.0, 2.0 and 3.0; C order only; descr '<f4' (float32) or
// '<i8' (int64). '=' and '|' are read as '<' on little-endian hosts, where NumPy
// reads them that way too, and rejected elsewhere. Shapes may be () (a scalar,
// one element) and may contain zero-size dims. The file must hold exactly one
// array: trailing bytes are an error.
// Write: format 1.0 (2.0 when the header does not fit in 1.0, as NumPy does),
// '<f4' or '<i8', C order, header padded to 64 bytes.
//
// Every error message starts with the file name (or `source`) and states what
// was expected and what was found, e.g.
//   "x.npy: unsupported descr '<f8': expected <f4 (float32) or <i8 (int64)"
//   "x.npy: truncated data: expected 24 bytes, got 20".
// All functions are thread-compatible and keep no state.

// NotFound when the file does not exist; other I/O failures map from errno.
// InvalidArgument for anything wrong in the contents (see DecodeNpy).
absl::StatusOr<v1::Tensor> ReadNpy(const std::string& path);

// Decodes the bytes of a whole .npy file; `source` names them in errors.
// InvalidArgument: bad magic, unsupported version, malformed header,
// fortran_order True, unsupported descr, negative or overflowing shape,
// truncated or trailing data.
absl::StatusOr<v1::Tensor> DecodeNpy(std::string_view bytes, std::string_view source);

// Encodes `tensor` as the bytes of a .npy file. InvalidArgument (naming the
// tensor) when its dtype is not FLOAT32 or INT64, a dim is negative, or raw's
// size is not product(shape) * element size.
absl::StatusOr<std::string> EncodeNpy(const v1::Tensor& tensor);

// EncodeNpy, then writes `path` (created or truncated). I/O failures map from
// errno and name the path; a partially written file may remain on failure.
absl::Status WriteNpy(const std::string& path, const v1::Tensor& tensor);

}  // namespace replicad::client

#endif  // REPLICAD_CLIENT_NPY_H_
