// GGUF v3 reader over a read-only mmap. Weights are used in place, never copied.
//
// Lifetime: every pointer / string_view handed out (tensor data, string values, array data)
// points into the mapping and stays valid until the GgufFile is destroyed.
// Errors: any malformed, truncated or unsupported input throws GgufError whose message starts
// with the file path, e.g. "/x/model.gguf: truncated tensor table".
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ls {

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ggml tensor types (ids as stored in the file).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ4_NL = 20, IQ4_XS = 23,
  BF16 = 30, MXFP4 = 39,
};

// Block geometry of a ggml type; block_elems == 0 for types we do not support.
struct GgmlTypeInfo {
  const char* name;
  int block_elems;
  int block_bytes;
};
const GgmlTypeInfo& ggml_type_info(GgmlType t);   // unknown ids -> {"unknown", 0, 0}
bool ggml_type_supported(GgmlType t);             // the weight types our kernels run
// Bytes of one row of n elements (n must be a multiple of block_elems).
size_t ggml_row_bytes(GgmlType t, int64_t n);

// Metadata value types (ids as stored in the file).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars: integer types in i64 (u64 values above INT64_MAX are kept in u64 too),
  // floats in f64, bool in i64 (0/1), strings in str.
  int64_t i64 = 0;
  uint64_t u64 = 0;
  double f64 = 0;
  std::string_view str;
  // Arrays: element type, count and a view of the elements in the mapping: numeric ones raw
  // little-endian packed (unaligned: read with memcpy), strings as GGUF stores them (u64 length,
  // bytes), validated at parse and listed on demand by strings() — a vocabulary's views are not
  // kept for the life of the file (262k of them for Gemma 3).
  GgufType arr_type = GgufType::U8;
  uint64_t arr_count = 0;
  const uint8_t* arr_data = nullptr;
  std::vector<std::string_view> strings() const;
};

struct GgufTensor {
  std::string name;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};   // ne[0] is the contiguous (innermost) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;            // relative to the data section
  uint64_t size_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return ggml_row_bytes(type, ne[0]); }
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // maps and parses; throws GgufError
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_bytes() const { return size_; }
  size_t data_offset() const { return data_offset_; }

  // Metadata
  const GgufValue* find(const std::string& key) const;   // nullptr if absent
  const std::vector<std::string>& keys() const { return key_order_; }
  // Typed getters: return `dflt` when absent; throw GgufError when present with an unusable type.
  std::string get_string(const std::string& key, const std::string& dflt = "") const;
  int64_t get_int(const std::string& key, int64_t dflt) const;     // any integer type
  double get_float(const std::string& key, double dflt) const;     // f32/f64 or integer
  bool get_bool(const std::string& key, bool dflt) const;
  // Arrays (empty vector when absent); throw when the element type does not fit.
  std::vector<std::string_view> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int32_t> get_int_array(const std::string& key) const;

  // Tensors
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(const std::string& name) const;        // nullptr if absent
  const GgufTensor& require_tensor(const std::string& name) const;  // throws GgufError naming it

  // Raise a GgufError prefixed with the file path.
  [[noreturn]] void fail(const std::string& what) const;

 private:
  void parse();
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::unordered_map<std::string, GgufValue> kv_;
  std::vector<std::string> key_order_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace ls
