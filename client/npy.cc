#include "client/npy.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace replicad::client {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";
constexpr absl::string_view kMagicPrintable = "\\x93NUMPY";
constexpr absl::string_view kExpectedDescr =
    "expected <f4 (float32), <f2 (float16), <i8 (int64), <i4 (int32), |i1 (int8), |u1 (uint8) or "
    "|b1 (bool)";
// NumPy pads the header so that the data starts at a multiple of 64 bytes,
// which lets memory-mapped arrays be aligned for any dtype.
constexpr size_t kHeaderAlign = 64;
// Long headers are cut in messages; the start is what identifies them.
constexpr size_t kMaxQuotedHeader = 200;

constexpr bool kHostIsLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

struct Header {
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  size_t data_bytes = 0;
};

// The dtypes .npy files carry here, with numpy's descr (little-endian).
struct NpyType {
  v1::DataType dtype;
  absl::string_view descr;
  size_t size;
};
constexpr NpyType kNpyTypes[] = {
    {v1::DATA_TYPE_FLOAT32, "<f4", 4}, {v1::DATA_TYPE_INT64, "<i8", 8},
    {v1::DATA_TYPE_INT32, "<i4", 4},   {v1::DATA_TYPE_INT8, "|i1", 1},
    {v1::DATA_TYPE_UINT8, "|u1", 1},   {v1::DATA_TYPE_BOOL, "|b1", 1},
    {v1::DATA_TYPE_FLOAT16, "<f2", 2},
};

const NpyType* NpyTypeOf(v1::DataType dtype) {
  for (const NpyType& type : kNpyTypes) {
    if (type.dtype == dtype) return &type;
  }
  return nullptr;
}

size_t ElementSize(v1::DataType dtype) {
  const NpyType* type = NpyTypeOf(dtype);
  return type != nullptr ? type->size : 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

// Sets *bytes to product(shape) * element_size; false on a negative dim or
// overflow. Reading and writing share it, so they accept the same shapes.
bool ByteCount(const std::vector<int64_t>& shape, size_t element_size, size_t* bytes) {
  uint64_t total = element_size;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (int64_t dim : shape) {
    if (dim < 0) return false;
    if (dim != 0 && total > kMax / static_cast<uint64_t>(dim)) return false;
    total *= static_cast<uint64_t>(dim);
  }
  if (total > std::numeric_limits<size_t>::max()) return false;
  *bytes = static_cast<size_t>(total);
  return true;
}

// The header is a Python dict literal written by repr(), e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// This reads just enough of Python's literal syntax for that: quoted strings,
// names and numbers, and bracketed values kept as raw text so that an
// unsupported value (a structured descr list) can be quoted in the error.
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, absl::string_view source) : text_(text), source_(source) {}

  absl::StatusOr<Header> Parse() {
    Header header;
    bool have_descr = false, have_order = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Malformed("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Consume(':')) return Malformed(absl::StrCat("expected ':' after key '", *key, "'"));
      SkipSpace();
      absl::StatusOr<absl::string_view> value = ParseValue();
      if (!value.ok()) return value.status();
      absl::Status status;
      if (*key == "descr") {
        status = ParseDescr(*value, &header.dtype);
        have_descr = true;
      } else if (*key == "fortran_order") {
        status = ParseFortranOrder(*value);
        have_order = true;
      } else if (*key == "shape") {
        status = ParseShape(*value, &header.shape);
        have_shape = true;
      } else {
        return Malformed(absl::StrCat("unexpected key '", *key,
                                      "': expected only 'descr', 'fortran_order' and 'shape'"));
      }
      if (!status.ok()) return status;
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return Malformed(absl::StrCat("expected ',' or '}' after the value of '", *key, "'"));
    }
    SkipSpace();
    if (pos_ != text_.size()) return Malformed("unexpected text after '}'");
    if (!have_descr || !have_order || !have_shape) {
      return Malformed("expected keys 'descr', 'fortran_order' and 'shape'");
    }
    return header;
  }

 private:
  absl::Status Malformed(absl::string_view what) const {
    absl::string_view quoted = text_.substr(0, kMaxQuotedHeader);
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": malformed header \"", absl::CHexEscape(quoted),
        quoted.size() < text_.size() ? "...\"" : "\"", ": ", what, " at offset ", pos_));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // Keys and descr strings never contain escapes in files NumPy writes; an
  // escaped quote is still skipped correctly so the error can quote the rest.
  absl::StatusOr<std::string> ParseString() {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Malformed("expected a quoted key");
    }
    absl::string_view span;
    if (!SkipQuoted(&span)) return Malformed("unterminated string");
    return std::string(span.substr(1, span.size() - 2));
  }

  bool SkipQuoted(absl::string_view* span) {
    size_t begin = pos_;
    char quote = text_[pos_++];
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') ++pos_;
      ++pos_;
    }
    if (pos_ >= text_.size()) return false;
    ++pos_;
    *span = text_.substr(begin, pos_ - begin);
    return true;
  }

  // The raw text of one value: a string, a bracketed group, or a bare token.
  absl::StatusOr<absl::string_view> ParseValue() {
    size_t begin = pos_;
    int depth = 0;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '\'' || c == '"') {
        absl::string_view ignored;
        if (!SkipQuoted(&ignored)) return Malformed("unterminated string");
        if (depth == 0) break;
        continue;
      }
      if (c == '(' || c == '[' || c == '{') {
        ++depth;
      } else if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) break;
        if (--depth == 0) {
          ++pos_;
          break;
        }
      } else if (depth == 0 && c == ',') {
        break;
      }
      ++pos_;
    }
    if (depth != 0) return Malformed("unbalanced brackets");
    absl::string_view value = absl::StripAsciiWhitespace(text_.substr(begin, pos_ - begin));
    if (value.empty()) return Malformed("expected a value");
    return value;
  }

  absl::Status ParseDescr(absl::string_view value, v1::DataType* dtype) const {
    absl::string_view descr = value;
    bool quoted = descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"') &&
                  descr.back() == descr.front();
    if (quoted) descr = descr.substr(1, descr.size() - 2);
    if (quoted && descr.size() == 3) {
      char order = descr[0];
      absl::string_view type = descr.substr(1);
      // One-byte types have no order ('|'); the others must be little-endian.
      bool little = order == '<' || (kHostIsLittleEndian && (order == '=' || order == '|')) ||
                    (type.size() == 2 && type[1] == '1');
      for (const NpyType& known : kNpyTypes) {
        if (little && type == known.descr.substr(1)) {
          *dtype = known.dtype;
          return absl::OkStatus();
        }
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": unsupported descr ", value, ": ", kExpectedDescr));
  }

  absl::Status ParseFortranOrder(absl::string_view value) const {
    if (value == "False") return absl::OkStatus();
    if (value == "True") {
      return absl::InvalidArgumentError(
          absl::StrCat(source_,
                       ": fortran_order is True: expected False (C order); save a C-ordered array, "
                       "e.g. numpy.ascontiguousarray(a)"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": fortran_order is ", value, ": expected False"));
  }

  absl::Status ParseShape(absl::string_view value, std::vector<int64_t>* shape) const {
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": bad shape ", value, ": ", what));
    };
    absl::string_view inner = value;
    if (!absl::ConsumePrefix(&inner, "(") || !absl::ConsumeSuffix(&inner, ")")) {
      return bad("expected a tuple of non-negative integers");
    }
    inner = absl::StripAsciiWhitespace(inner);
    if (inner.empty()) return absl::OkStatus();
    // Python requires a trailing comma for one-element tuples and allows one
    // after any number of elements.
    if (absl::ConsumeSuffix(&inner, ",")) inner = absl::StripAsciiWhitespace(inner);
    for (absl::string_view item : absl::StrSplit(inner, ',')) {
      item = absl::StripAsciiWhitespace(item);
      // Python 2 NumPy wrote longs as "3L".
      absl::ConsumeSuffix(&item, "L");
      int64_t dim;
      if (!absl::SimpleAtoi(item, &dim) || dim < 0) {
        return bad(absl::StrCat("expected non-negative integers, got '", item, "'"));
      }
      shape->push_back(dim);
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  absl::string_view source_;
  size_t pos_ = 0;
};

uint32_t ReadLittleEndian(absl::string_view bytes) {
  uint32_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

// Everything but the data: checks the preamble and header, and that the data
// that follows has exactly the size the header promises.
absl::StatusOr<Header> DecodeHeader(absl::string_view bytes, absl::string_view source) {
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": bad magic: expected ", kMagicPrintable, ", got \"",
                     absl::CHexEscape(bytes.substr(0, kMagic.size())), "\" (not a .npy file)"));
  }
  if (bytes.size() < kMagic.size() + 2) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": truncated header: expected at least ",
                                                   kMagic.size() + 2, " bytes, got ",
                                                   bytes.size()));
  }
  int major = static_cast<unsigned char>(bytes[6]);
  int minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported format version ", major,
                                                   ".", minor, ": expected 1.0, 2.0 or 3.0"));
  }
  size_t length_bytes = major == 1 ? 2 : 4;
  size_t header_begin = 8 + length_bytes;
  if (bytes.size() < header_begin) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": truncated header: expected at least ",
                                                   header_begin, " bytes, got ", bytes.size()));
  }
  size_t header_length = ReadLittleEndian(bytes.substr(8, length_bytes));
  if (bytes.size() - header_begin < header_length) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": truncated header: expected ",
                                                   header_length, " bytes, got ",
                                                   bytes.size() - header_begin));
  }
  absl::StatusOr<Header> header =
      HeaderParser(bytes.substr(header_begin, header_length), source).Parse();
  if (!header.ok()) return header.status();

  header->data_offset = header_begin + header_length;
  if (!ByteCount(header->shape, ElementSize(header->dtype), &header->data_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": shape ", ShapeString(header->shape), " is too large to address"));
  }
  size_t available = bytes.size() - header->data_offset;
  if (available < header->data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": truncated data: expected ",
                                                   header->data_bytes, " bytes, got ", available));
  }
  if (available > header->data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": trailing data: expected ", header->data_bytes, " bytes, got ",
                     available, " (a file with more than one array is not supported)"));
  }
  return header;
}

void FillTensor(const Header& header, v1::Tensor* tensor) {
  tensor->set_dtype(header.dtype);
  for (int64_t dim : header.shape) tensor->add_shape(dim);
}

// Closes a file opened for reading on every return path.
struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

absl::StatusOr<v1::Tensor> DecodeNpy(std::string_view bytes_in, std::string_view source_in) {
  // Debian's Abseil has its own string_view type rather than std's.
  absl::string_view bytes(bytes_in.data(), bytes_in.size());
  absl::string_view source(source_in.data(), source_in.size());
  absl::StatusOr<Header> header = DecodeHeader(bytes, source);
  if (!header.ok()) return header.status();
  v1::Tensor tensor;
  FillTensor(*header, &tensor);
  tensor.set_raw(std::string(bytes.substr(header->data_offset)));
  return tensor;
}

absl::StatusOr<v1::Tensor> ReadNpy(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  std::string contents;
  struct stat info;
  if (fstat(fileno(file.get()), &info) == 0 && info.st_size > 0) {
    contents.reserve(static_cast<size_t>(info.st_size));
  }
  char chunk[1 << 16];
  while (true) {
    size_t n = std::fread(chunk, 1, sizeof(chunk), file.get());
    contents.append(chunk, n);
    if (n < sizeof(chunk)) break;
  }
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
  }
  absl::StatusOr<Header> header = DecodeHeader(contents, path);
  if (!header.ok()) return header.status();
  v1::Tensor tensor;
  FillTensor(*header, &tensor);
  // Inputs can be hundreds of MiB: shift the data down in place and hand the
  // string to the message rather than copying it.
  contents.erase(0, header->data_offset);
  tensor.set_raw(std::move(contents));
  return tensor;
}

absl::StatusOr<std::string> EncodeNpy(const v1::Tensor& tensor) {
  const NpyType* type = NpyTypeOf(tensor.dtype());
  if (type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor.name(), "': dtype ", v1::DataType_Name(tensor.dtype()), " (",
        static_cast<int>(tensor.dtype()),
        ") cannot be saved: expected DATA_TYPE_FLOAT32, INT64, INT32, INT8, UINT8 or BOOL"));
  }
  const std::string descr(type->descr);
  std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  size_t expected = 0;
  if (!ByteCount(shape, ElementSize(tensor.dtype()), &expected)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name(), "': shape ",
                                                   ShapeString(shape),
                                                   " has a negative dim or is too large"));
  }
  if (tensor.raw().size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "': shape ", ShapeString(shape), " needs ",
                     expected, " bytes of raw data, got ", tensor.raw().size()));
  }

  std::string dict = absl::StrCat(
      "{'descr': '", descr, "', 'fortran_order': False, 'shape': ", ShapeString(shape), ", }");
  // The preamble is 10 bytes in 1.0 (2-byte header length) and 12 in 2.0.
  size_t preamble = 10;
  size_t padded = (preamble + dict.size() + 1 + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  if (padded - preamble > std::numeric_limits<uint16_t>::max()) {
    preamble = 12;
    padded = (preamble + dict.size() + 1 + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  }
  size_t header_length = padded - preamble;

  std::string out;
  out.reserve(padded + tensor.raw().size());
  out.append(kMagic.data(), kMagic.size());
  out.push_back(preamble == 10 ? 1 : 2);
  out.push_back(0);
  for (size_t i = 0; i < preamble - 8; ++i) {
    out.push_back(static_cast<char>((header_length >> (8 * i)) & 0xff));
  }
  out.append(dict);
  out.append(padded - out.size() - 1, ' ');
  out.push_back('\n');
  out.append(tensor.raw());
  return out;
}

absl::Status WriteNpy(const std::string& path, const v1::Tensor& tensor) {
  absl::StatusOr<std::string> bytes = EncodeNpy(tensor);
  if (!bytes.ok()) return bytes.status();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot create"));
  size_t written = std::fwrite(bytes->data(), 1, bytes->size(), file);
  int write_errno = errno;
  bool closed = std::fclose(file) == 0;
  if (written != bytes->size()) {
    return absl::ErrnoToStatus(write_errno, absl::StrCat(path, ": cannot write"));
  }
  if (!closed) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

}  // namespace replicad::client
