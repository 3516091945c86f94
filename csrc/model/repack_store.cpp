#include "model/repack_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <utility>

#include "common/huge_alloc.h"

namespace ls {
namespace {

constexpr char kMagic[8] = {'L', 'S', 'R', 'E', 'P', 'A', 'C', 'K'};
constexpr uint32_t kFileVersion = 1;
constexpr size_t kHeaderBytes = 4096;  // keeps the data page-aligned
constexpr size_t kMaxLayoutChars = 2048;  // longer layout keys are stored as their digest

// On-disk header (native little-endian; the cache never leaves the machine that wrote it).
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t key_bytes;
  uint64_t data_bytes;
  uint64_t checksum;
  char key[kHeaderBytes - 32];
};
static_assert(sizeof(FileHeader) == kHeaderBytes, "header is one page");

uint64_t fnv1a(const std::string& s) { return fnv1a64(s.data(), s.size()); }

std::string hex16(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[size_t(i)] = digits[v & 15];
  return s;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Closes a descriptor on every path out of a function.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Maps an existing cache file read-only and checks it completely; nullptr if absent or bad
// (a bad file is deleted so the caller rebuilds it).
void* map_valid(const std::string& file, const std::string& key, size_t data_bytes, std::string& why) {
  Fd f(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) {
    why = errno == ENOENT ? "" : errno_text("open");
    return nullptr;
  }
  struct stat st{};
  if (fstat(f.fd, &st) != 0 || size_t(st.st_size) != kHeaderBytes + data_bytes) {
    why = "wrong size";
    ::unlink(file.c_str());
    return nullptr;
  }
  void* m = mmap(nullptr, kHeaderBytes + data_bytes, PROT_READ, MAP_SHARED, f.fd, 0);
  if (m == MAP_FAILED) {
    why = errno_text("mmap");
    return nullptr;
  }
  const auto* h = static_cast<const FileHeader*>(m);
  const auto* data = static_cast<const uint8_t*>(m) + kHeaderBytes;
  const bool ok = std::memcmp(h->magic, kMagic, 8) == 0 && h->version == kFileVersion &&
                  h->data_bytes == data_bytes && h->key_bytes == key.size() &&
                  std::memcmp(h->key, key.data(), key.size()) == 0 &&
                  h->checksum == repack_checksum(data, data_bytes);
  if (!ok) {
    why = "corrupt or stale";
    munmap(m, kHeaderBytes + data_bytes);
    ::unlink(file.c_str());
    return nullptr;
  }
  return m;
}

// Writes name.tmp.<pid> (blocks reserved first, so a full disk fails here and not as SIGBUS
// in fill), renames it into place and returns its mapping, made read-only.
void* build_file(const std::string& file, const std::string& key, size_t data_bytes,
                 const std::function<void(uint8_t*)>& fill, std::string& why) {
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  Fd f(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (f.fd < 0) {
    why = errno_text("create");
    return nullptr;
  }
  const size_t total = kHeaderBytes + data_bytes;
  const int rc = posix_fallocate(f.fd, 0, off_t(total));
  void* m = rc == 0 ? mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0) : MAP_FAILED;
  if (m == MAP_FAILED) {
    why = rc != 0 ? std::string("fallocate: ") + std::strerror(rc) : errno_text("mmap");
    ::unlink(tmp.c_str());
    return nullptr;
  }
  auto* data = static_cast<uint8_t*>(m) + kHeaderBytes;
  fill(data);
  FileHeader& h = *static_cast<FileHeader*>(m);
  std::memcpy(h.magic, kMagic, 8);
  h.version = kFileVersion;
  h.key_bytes = uint32_t(key.size());
  h.data_bytes = data_bytes;
  h.checksum = repack_checksum(data, data_bytes);
  std::memcpy(h.key, key.data(), key.size());
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    why = errno_text("rename");
    munmap(m, total);
    ::unlink(tmp.c_str());
    return nullptr;
  }
  mprotect(m, total, PROT_READ);
  return m;
}

// Removes cache files of older versions of this model file (same prefix, other key) and temp
// files left by builders that died (called when ours is absent, under its lock). Lanes still
// mapping a removed file keep their pages; lock files stay (another lane may hold one).
void remove_stale(const std::string& dir, const std::string& prefix) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.compare(0, prefix.size(), prefix) == 0 && n.find(".lock") == std::string::npos)
      ::unlink((dir + "/" + n).c_str());
  }
  closedir(d);
}

// Maps the cache file of (model_path, layout_key), building it first when it is absent or bad;
// nullptr (why says why) when the cache cannot be used. file: its path; built: this call wrote it.
void* map_cache(const std::string& dir, const std::string& model_path, const std::string& layout_key,
                size_t data_bytes, const std::function<void(uint8_t*)>& fill, std::string& file, bool& built,
                std::string& why) {
  const std::string identity = model_file_identity(model_path, why);
  if (identity.empty()) return nullptr;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    why = "mkdir " + dir + ": " + ec.message();
    return nullptr;
  }
  const std::string abs_path = std::filesystem::absolute(model_path, ec).lexically_normal().string();
  // A long tensor list (a 48-layer MoE lists ~340 tensors, ~5 KB) is keyed by its digest, so the key
  // fits the header and many-layer models still share one cache file instead of a copy per lane.
  const std::string layout = layout_key.size() <= kMaxLayoutChars
                                 ? layout_key
                                 : "layout_fnv1a=" + hex16(fnv1a(layout_key)) + ";layout_chars=" +
                                       std::to_string(layout_key.size());
  const std::string key = identity + ";" + layout;
  if (key.size() > sizeof(FileHeader::key)) {
    why = "key too long";
    return nullptr;
  }
  std::string stem = std::filesystem::path(model_path).stem().string();
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  const std::string prefix = stem.substr(0, 64) + "-" + hex16(fnv1a(abs_path)) + "-";
  file = dir + "/" + prefix + hex16(fnv1a(key)) + ".lsrp";
  Fd lock(::open((file + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));  // released when closed
  if (lock.fd < 0 || flock(lock.fd, LOCK_EX) != 0) {
    why = errno_text("lock");
    return nullptr;
  }
  if (void* m = map_valid(file, key, data_bytes, why)) return m;
  const std::string bad = why;  // empty: the file was absent (a bad one is already deleted)
  if (bad.empty()) remove_stale(dir, prefix);
  built = true;
  void* m = build_file(file, key, data_bytes, fill, why);
  if (m && !bad.empty()) why = "rebuilt (" + bad + ")";
  return m;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string model_file_identity(const std::string& model_path, std::string& why) {
  struct stat st{};
  if (::stat(model_path.c_str(), &st) != 0) {
    why = errno_text("stat model");
    return "";
  }
  std::error_code ec;
  const std::string abs_path = std::filesystem::absolute(model_path, ec).lexically_normal().string();
  return "model=" + abs_path + ";dev=" + std::to_string(uint64_t(st.st_dev)) + ";ino=" +
         std::to_string(uint64_t(st.st_ino)) + ";size=" + std::to_string(uint64_t(st.st_size)) +
         ";mtime_ns=" + std::to_string(int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
}

uint64_t repack_checksum(const uint8_t* p, size_t n) {
  constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t h[4] = {P1, P2, ~P1, ~P2};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      h[k] += w * P2;
      h[k] = ((h[k] << 31) | (h[k] >> 33)) * P1;
    }
  }
  uint64_t r = uint64_t(n) * P1;
  for (int k = 0; k < 4; ++k) r = ((r ^ h[k]) * P2) ^ (r >> 29);
  for (; i < n; ++i) r = (r ^ p[i]) * P1;
  return r ^ (r >> 32);
}

RepackStore::~RepackStore() { release(); }

RepackStore::RepackStore(RepackStore&& o) noexcept { *this = std::move(o); }

RepackStore& RepackStore::operator=(RepackStore&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    data_bytes_ = std::exchange(o.data_bytes_, 0);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    private_ = std::exchange(o.private_, nullptr);
    source_ = std::exchange(o.source_, Source::None);
    status_ = std::move(o.status_);
  }
  return *this;
}

void RepackStore::release() {
  if (map_) munmap(map_, map_bytes_);
  std::free(private_);
  map_ = nullptr;
  private_ = nullptr;
  data_ = nullptr;
}

RepackStore RepackStore::open(const std::string& cache_dir, const std::string& model_path,
                              const std::string& layout_key, size_t data_bytes,
                              const std::function<void(uint8_t*)>& fill) {
  RepackStore s;
  s.data_bytes_ = data_bytes;
  if (data_bytes == 0) return s;
  std::string why = "no cache dir", file;
  bool built = false;
  if (!cache_dir.empty()) {
    if (void* m = map_cache(cache_dir, model_path, layout_key, data_bytes, fill, file, built, why)) {
      s.map_ = m;
      s.map_bytes_ = kHeaderBytes + data_bytes;
      s.data_ = static_cast<uint8_t*>(m) + kHeaderBytes;
      s.source_ = built ? Source::Built : Source::Mapped;
      s.status_ = (built ? "built " : "mapped ") + file + (built && !why.empty() ? " " + why : "");
      return s;
    }
  }
  s.private_ = alloc_huge(data_bytes);  // streamed every token: huge pages (common/huge_alloc.h)
  fill(s.private_);
  s.data_ = s.private_;
  s.source_ = Source::Private;
  s.status_ = "private (" + why + ")";
  return s;
}

}  // namespace ls
