// Memory for the repacked (row-interleaved) weights, shared between the lanes of a machine.
//
// Every lane serving the same model file needs the same repacked bytes. Built in each lane's
// own memory they would cost every replica a private copy of the weights; instead the first
// lane writes them to a cache file and every lane maps that file read-only and shared, so the
// kernel keeps one copy in the page cache and a later launch skips the repacking.
//
// Cache file `<dir>/<model stem>-<path hash>-<key hash>.lsrp`: a 4096-byte header (magic,
// format version, the key text, data size, a 64-bit checksum of the data) and the data,
// page-aligned. The key text names the model file's identity (absolute path, device, inode,
// size, modification time in ns) and the layout (format version, every repacked tensor's type
// and shape), so a changed model file or a changed layout gets a new file. Every open checks
// the size, the header and the checksum; a file that fails is deleted and rebuilt. Builders
// take an exclusive flock on `<name>.lock`, write `<name>.tmp.<pid>` and rename it into place,
// so a reader never sees a partial file and concurrent lanes build once. Cache failures
// (read-only or full disk) never fail a load: the store falls back to private memory and says
// why in status().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace ls {

class RepackStore {
 public:
  enum class Source { None, Mapped, Built, Private };

  RepackStore() = default;
  ~RepackStore();
  RepackStore(RepackStore&& o) noexcept;
  RepackStore& operator=(RepackStore&& o) noexcept;
  RepackStore(const RepackStore&) = delete;
  RepackStore& operator=(const RepackStore&) = delete;

  // Fills data_bytes of repacked weights with fill(dst), or maps them from the cache.
  // cache_dir empty: private memory, no file. layout_key: the layout part of the key (the
  // caller lists the repacked tensors). fill must be deterministic.
  static RepackStore open(const std::string& cache_dir, const std::string& model_path,
                          const std::string& layout_key, size_t data_bytes,
                          const std::function<void(uint8_t*)>& fill);

  const uint8_t* data() const { return data_; }
  size_t data_bytes() const { return data_bytes_; }
  Source source() const { return source_; }
  // "mapped <file>", "built <file>", "private (no cache dir)", "private (<why the cache failed>)".
  const std::string& status() const { return status_; }

 private:
  void release();

  uint8_t* data_ = nullptr;      // start of the weights
  size_t data_bytes_ = 0;
  void* map_ = nullptr;          // file mapping (header + data), or nullptr
  size_t map_bytes_ = 0;
  uint8_t* private_ = nullptr;   // aligned_alloc'd buffer, or nullptr
  Source source_ = Source::None;
  std::string status_;
};

// The identity of a model file as cache keys name it: "model=<absolute path>;dev=..;ino=..;size=..;
// mtime_ns=.." — a replaced or rewritten file gets another identity. Empty (why set) when the file
// cannot be stat'ed.
std::string model_file_identity(const std::string& model_path, std::string& why);
// FNV-1a of s (file names of cache keys; not a cryptographic hash).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

// 64-bit checksum of the cache data (four independent multiply-rotate lanes; a corruption
// check, not a cryptographic hash). Exposed for tests.
uint64_t repack_checksum(const uint8_t* p, size_t n);

}  // namespace ls
