// DiskTier: the prefix cache's disk tier — whole K/V pages of base-model prefixes kept as files, so
// a prompt whose cached prefix left RAM (or was computed before a restart) reads its pages back
// instead of prefilling them.
//
// A page is named by its identity and its prefix: `<dir>/<fnv(identity)>-<prefix_hash>.lskv`, the
// identity being the model file's (model/repack_store.h model_file_identity: a replaced file gets
// another one) plus the K/V layout (KvCache::layout_key, kKvPagePositions), the prefix hash being
// of every key id from position 0 through the page's last. The file holds a header (magic,
// version, the identity text, the id count, the data size, a checksum of the data), the prefix's
// ids, then the page's bytes (KvCache::read_page). A read checks every part; a file that fails
// (corrupt, truncated, of another identity or another prefix) is removed and counts as absent.
//
// Writes happen on a background thread: put() copies the ids and page bytes into one of
// kQueuePages buffers allocated at construction and returns (the token loop pays a memcpy); a
// full queue drops the page (it stays cached in RAM). Files are written `<name>.tmp.<pid>.<n>`
// and renamed into place, so a reader never sees a partial file and lanes of the same model may
// share the directory. Budget: the files of this identity, least recently used (written or
// read; a read also sets the file's mtime, so the order survives a restart) removed first
// beyond min(max_bytes, half the filesystem's free space at construction). Lanes sharing the
// directory read each other's pages: a page missing from the index is looked up as a file.
// Thread-safety: put/get/contains/stats from one thread (the engine's); the writer is internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ls {

class KvCache;

// One page file (exposed for tests). write: tmp + rename; false and why on failure.
bool write_kv_page_file(const std::string& path, const std::string& identity, const int32_t* ids, int32_t n_ids,
                        const uint8_t* data, size_t n_bytes, std::string& why);
// Reads exactly (identity, ids[0, n_ids), n_bytes) into out; false when absent, and when the
// file is anything else or damaged — then it is removed.
bool read_kv_page_file(const std::string& path, const std::string& identity, const int32_t* ids, int32_t n_ids,
                       uint8_t* out, size_t n_bytes);

struct DiskTierStats {
  int64_t bytes_used = 0, max_bytes = 0;  // this identity's files, and their budget
  int32_t files = 0;
  uint64_t writes = 0, reads = 0;          // pages written, pages read back
  uint64_t dropped = 0, evictions = 0;     // puts refused (queue full), files removed by the budget
};

class DiskTier {
 public:
  static constexpr int kQueuePages = 16;

  // Scans dir for this identity's files. max_ids: the longest prefix a page may end (the context).
  // Throws std::runtime_error naming dir when it is missing or not writable.
  DiskTier(const std::string& dir, const std::string& identity, size_t page_bytes, int64_t max_bytes,
           int32_t max_ids);
  ~DiskTier();  // writes what is queued, then joins the writer
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The name of the page ending at ids[n): hash of ids[0, n).
  static uint64_t prefix_hash(const int32_t* ids, int32_t n);
  // Written or queued by this tier, or written since by another lane sharing the directory.
  bool contains(uint64_t hash) const;
  // Queues the page ending at ids[n): page_bytes from data, or from kv's pages page[group]
  // (KvCache::read_page). False: dropped
  // (queue full) or already there.
  bool put(const int32_t* ids, int32_t n, uint64_t hash, const uint8_t* data);
  bool put(const int32_t* ids, int32_t n, uint64_t hash, const KvCache& kv, const int32_t* page);
  // Reads the page ending at ids[n) into out (page_bytes); false when absent or bad (removed).
  bool get(const int32_t* ids, int32_t n, uint64_t hash, uint8_t* out);
  void flush();  // returns once every queued page is written
  DiskTierStats stats() const;
  const std::string& dir() const;
  const std::string& identity() const;
  size_t page_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls
