#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ls {
namespace {

// Sanity caps: a count or length beyond these is a corrupt file, not a big one.
constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxStringBytes = 1u << 30;
constexpr uint32_t kMaxDims = 4;

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

// Size of a fixed-width scalar type, 0 for string/array/unknown.
size_t scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: case GgufType::BOOL:
      return true;
    default:
      return false;
  }
}

// Reads a little-endian scalar of type t at p into the value's numeric fields.
void read_scalar(GgufType t, const uint8_t* p, GgufValue& v) {
  switch (t) {
    case GgufType::U8: v.u64 = p[0]; v.i64 = p[0]; break;
    case GgufType::BOOL: v.u64 = p[0] != 0; v.i64 = p[0] != 0; break;
    case GgufType::I8: { int8_t x; memcpy(&x, p, 1); v.i64 = x; v.u64 = uint64_t(x); break; }
    case GgufType::U16: { uint16_t x; memcpy(&x, p, 2); v.i64 = x; v.u64 = x; break; }
    case GgufType::I16: { int16_t x; memcpy(&x, p, 2); v.i64 = x; v.u64 = uint64_t(x); break; }
    case GgufType::U32: { uint32_t x; memcpy(&x, p, 4); v.i64 = x; v.u64 = x; break; }
    case GgufType::I32: { int32_t x; memcpy(&x, p, 4); v.i64 = x; v.u64 = uint64_t(x); break; }
    case GgufType::U64: { uint64_t x; memcpy(&x, p, 8); v.u64 = x; v.i64 = int64_t(x); break; }
    case GgufType::I64: { int64_t x; memcpy(&x, p, 8); v.i64 = x; v.u64 = uint64_t(x); break; }
    case GgufType::F32: { float x; memcpy(&x, p, 4); v.f64 = x; break; }
    case GgufType::F64: { double x; memcpy(&x, p, 8); v.f64 = x; break; }
    default: break;
  }
  if (is_integer(t)) v.f64 = (t == GgufType::U64) ? double(v.u64) : double(v.i64);
}

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). Keys and tensor
// names are read with it: they become Python str and error messages, and a key that is not text
// raised UnicodeDecodeError out of GgufFile.keys() (found by benchmarks/fuzz.py gguf).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = uint8_t(s[i]);
    size_t n;
    uint32_t cp;
    if (b < 0x80) { ++i; continue; }
    if ((b & 0xE0) == 0xC0) { n = 1; cp = b & 0x1F; }
    else if ((b & 0xF0) == 0xE0) { n = 2; cp = b & 0x0F; }
    else if ((b & 0xF8) == 0xF0) { n = 3; cp = b & 0x07; }
    else return false;
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const uint8_t c = uint8_t(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// Bounds-checked cursor over the mapping; every read names what it was reading on failure.
struct Cursor {
  const GgufFile& file;
  const uint8_t* base;
  size_t size;
  size_t pos = 0;

  void need(size_t n, const char* what) {
    if (n > size || pos > size - n) file.fail(std::string("truncated file while reading ") + what);
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T x;
    memcpy(&x, base + pos, sizeof(T));
    pos += sizeof(T);
    return x;
  }
  std::string_view str(const char* what) {
    uint64_t n = get<uint64_t>(what);
    if (n > kMaxStringBytes) file.fail(std::string("absurd string length in ") + what);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(base + pos), n);
    pos += n;
    return s;
  }
};

void parse_value(Cursor& c, GgufType type, GgufValue& v, const std::string& key) {
  v.type = type;
  if (type == GgufType::STRING) {
    v.str = c.str(key.c_str());
    return;
  }
  if (type == GgufType::ARRAY) {
    uint32_t et = c.get<uint32_t>(key.c_str());
    uint64_t n = c.get<uint64_t>(key.c_str());
    v.arr_type = GgufType(et);
    v.arr_count = n;
    if (v.arr_type == GgufType::STRING) {
      if (n > c.size / 8) c.file.fail("absurd array length for key " + key);
      v.arr_data = c.base + c.pos;
      for (uint64_t i = 0; i < n; ++i) c.str(key.c_str());  // bounds-checks every element
      return;
    }
    size_t eb = scalar_bytes(v.arr_type);
    if (eb == 0) c.file.fail("unsupported array element type " + std::to_string(et) + " for key " + key);
    if (n > c.size / eb) c.file.fail("absurd array length for key " + key);
    c.need(n * eb, key.c_str());
    v.arr_data = c.base + c.pos;
    c.pos += n * eb;
    return;
  }
  size_t nb = scalar_bytes(type);
  if (nb == 0) c.file.fail("unknown metadata value type " + std::to_string(uint32_t(type)) + " for key " + key);
  c.need(nb, key.c_str());
  read_scalar(type, c.base + c.pos, v);
  c.pos += nb;
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string("cannot open: ") + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ < 24) {
    ::close(fd);
    fail("not a GGUF file (too small: " + std::to_string(size_) + " bytes)");
  }
  void* m = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) fail(std::string("mmap failed: ") + strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  try {
    parse();
  } catch (...) {
    munmap(const_cast<uint8_t*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

GgufFile::~GgufFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
}

void GgufFile::fail(const std::string& what) const { throw GgufError(path_ + ": " + what); }

void GgufFile::parse() {
  Cursor c{*this, map_, size_};
  if (memcmp(map_, "GGUF", 4) != 0) fail("not a GGUF file (bad magic)");
  c.pos = 4;
  version_ = c.get<uint32_t>("version");
  if (version_ != 2 && version_ != 3) fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2 and 3)");
  uint64_t n_tensors = c.get<uint64_t>("tensor count");
  uint64_t n_kv = c.get<uint64_t>("metadata count");
  if (n_tensors > kMaxTensors) fail("absurd tensor count " + std::to_string(n_tensors));
  if (n_kv > kMaxKeys) fail("absurd metadata count " + std::to_string(n_kv));

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(c.str("metadata key"));
    if (!valid_utf8(key)) fail("metadata key " + std::to_string(i) + " is not UTF-8 text");
    uint32_t type = c.get<uint32_t>("metadata type");
    GgufValue v;
    parse_value(c, GgufType(type), v, key);
    if (kv_.count(key)) fail("duplicate metadata key " + key);
    key_order_.push_back(key);
    kv_.emplace(key, std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (!is_integer(a->type) || a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0 || a->u64 > 65536)
      fail("invalid general.alignment");
    alignment_ = size_t(a->u64);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = std::string(c.str("tensor name"));
    if (!valid_utf8(t.name)) fail("the name of tensor " + std::to_string(i) + " is not UTF-8 text");
    t.n_dims = c.get<uint32_t>("tensor dims");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
      fail("tensor " + t.name + " has unsupported dimension count " + std::to_string(t.n_dims));
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      uint64_t ne = c.get<uint64_t>("tensor shape");
      if (ne == 0 || ne > (uint64_t(1) << 40)) fail("tensor " + t.name + " has absurd dimension " + std::to_string(ne));
      t.ne[d] = int64_t(ne);
    }
    uint32_t type = c.get<uint32_t>("tensor type");
    t.type = GgmlType(type);
    t.offset = c.get<uint64_t>("tensor offset");
    const GgmlTypeInfo& info = ggml_type_info(t.type);
    if (info.block_elems == 0) fail("tensor " + t.name + " has unknown ggml type " + std::to_string(type));
    if (t.ne[0] % info.block_elems != 0)
      fail("tensor " + t.name + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
           info.name + " block size");
    // Overflow-safe size: rows × row bytes, each factor bounded above.
    long double total = (long double)ggml_row_bytes(t.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3];
    if (total > (long double)size_) fail("tensor " + t.name + " is larger than the file");
    t.size_bytes = uint64_t(total);
    if (tensor_index_.count(t.name)) fail("duplicate tensor name " + t.name);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  data_offset_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_) fail("truncated file: no data section");
  for (GgufTensor& t : tensors_) {
    if (t.offset % alignment_ != 0) fail("tensor " + t.name + " is not aligned");
    if (t.offset > size_ - data_offset_ || t.size_bytes > size_ - data_offset_ - t.offset)
      fail("tensor " + t.name + " extends past the end of the file (truncated?)");
    t.data = map_ + data_offset_ + t.offset;
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string GgufFile::get_string(const std::string& key, const std::string& dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (v->type != GgufType::STRING) fail("metadata " + key + " should be a string, is " + gguf_type_name(v->type));
  return std::string(v->str);
}

int64_t GgufFile::get_int(const std::string& key, int64_t dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (!is_integer(v->type)) fail("metadata " + key + " should be an integer, is " + gguf_type_name(v->type));
  return v->i64;
}

double GgufFile::get_float(const std::string& key, double dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (v->type != GgufType::F32 && v->type != GgufType::F64 && !is_integer(v->type))
    fail("metadata " + key + " should be a number, is " + gguf_type_name(v->type));
  return v->f64;
}

bool GgufFile::get_bool(const std::string& key, bool dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (!is_integer(v->type)) fail("metadata " + key + " should be a bool, is " + gguf_type_name(v->type));
  return v->i64 != 0;
}

std::vector<std::string_view> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || v->arr_type != GgufType::STRING) fail("metadata " + key + " should be a string array");
  return v->strings();
}

std::vector<std::string_view> GgufValue::strings() const {
  std::vector<std::string_view> out;
  if (type != GgufType::ARRAY || arr_type != GgufType::STRING) return out;
  out.reserve(arr_count);
  const uint8_t* p = arr_data;
  for (uint64_t i = 0; i < arr_count; ++i) {  // checked at parse: every length fits the mapping
    uint64_t n;
    memcpy(&n, p, 8);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), n);
    p += 8 + n;
  }
  return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || v->arr_type == GgufType::STRING) fail("metadata " + key + " should be a numeric array");
  std::vector<float> out(v->arr_count);
  const size_t eb = scalar_bytes(v->arr_type);
  for (uint64_t i = 0; i < v->arr_count; ++i) {
    GgufValue e;
    read_scalar(v->arr_type, v->arr_data + i * eb, e);
    out[i] = float(e.f64);
  }
  return out;
}

std::vector<int32_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || !is_integer(v->arr_type)) fail("metadata " + key + " should be an integer array");
  std::vector<int32_t> out(v->arr_count);
  const size_t eb = scalar_bytes(v->arr_type);
  for (uint64_t i = 0; i < v->arr_count; ++i) {
    GgufValue e;
    read_scalar(v->arr_type, v->arr_data + i * eb, e);
    out[i] = int32_t(e.i64);
  }
  return out;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::require_tensor(const std::string& name) const {
  const GgufTensor* t = tensor(name);
  if (!t) fail("missing tensor " + name);
  return *t;
}

}  // namespace ls
