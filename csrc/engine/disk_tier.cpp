#include "engine/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/disk_file.h"
#include "model/kv_cache.h"
#include "model/repack_store.h"

namespace ls {

namespace {

constexpr char kPageMagic[8] = {'L', 'S', 'K', 'V', 'P', 'A', 'G', 'E'};
constexpr uint32_t kPageVersion = 1;
constexpr const char* kSuffix = ".lskv";

}  // namespace

bool write_kv_page_file(const std::string& path, const std::string& identity, const int32_t* ids, int32_t n_ids,
                        const uint8_t* data, size_t n_bytes, std::string& why) {
  const Span parts[2] = {{ids, size_t(n_ids) * sizeof(int32_t)}, {data, n_bytes}};
  return write_checked_file(path, kPageMagic, kPageVersion, identity, uint64_t(n_ids), parts, 2, why);
}

bool read_kv_page_file(const std::string& path, const std::string& identity, const int32_t* ids, int32_t n_ids,
                       uint8_t* out, size_t n_bytes) {
  CheckedFile f;
  std::string why;
  if (!f.open(path, kPageMagic, kPageVersion, identity, why)) {
    if (!why.empty()) ::unlink(path.c_str());  // present but not ours
    return false;
  }
  const size_t id_bytes = size_t(n_ids) * sizeof(int32_t);
  if (id_bytes > n_bytes) return false;  // the ids are read through out (no allocation here): never so
  const bool ok = f.count() == uint64_t(n_ids) && f.body_bytes() == id_bytes + n_bytes && f.read(out, id_bytes) &&
                  std::memcmp(out, ids, id_bytes) == 0 && f.read(out, n_bytes) && f.checksum_ok();
  if (!ok) ::unlink(path.c_str());
  return ok;
}

struct DiskTier::Impl {
  struct Entry {
    int64_t bytes = 0;
    uint64_t last_used = 0;  // clock order; files found at start by their mtime
    bool written = false;
  };
  struct Job {
    std::vector<int32_t> ids;   // capacity max_ids
    std::vector<uint8_t> data;  // [page_bytes]
    uint64_t hash = 0;
  };

  std::string dir, identity, id_hex;
  size_t page_bytes;
  int32_t max_ids;
  int64_t max_bytes = 0, bytes_used = 0;
  uint64_t clock = 0, writes = 0, reads = 0, dropped = 0, evictions = 0, tmp_serial = 0;
  std::unordered_map<uint64_t, Entry> index;  // by prefix hash (guarded by mu)

  std::vector<Job> jobs;          // [kQueuePages] buffers, allocated once
  std::vector<int32_t> free_jobs, queue;  // job indices: free / queued oldest first
  mutable std::mutex mu;
  std::condition_variable cv_work, cv_idle;
  bool stopping = false, writing = false;
  std::thread writer;

  std::string file_of(uint64_t hash) const { return dir + "/" + id_hex + "-" + hex64(hash) + kSuffix; }

  static std::string hex64(uint64_t v) {
    static const char* digits = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4) s[size_t(i)] = digits[v & 15];
    return s;
  }

  // This identity's files (LRU order by mtime); temp files of writers that died are removed.
  void scan() {
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    std::vector<std::pair<int64_t, uint64_t>> found;  // (mtime_ns, hash)
    const std::string prefix = id_hex + "-";
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string path = dir + "/" + n;
      struct stat st{};
      if (n.find(".tmp.") != std::string::npos) {
        ::unlink(path.c_str());
        continue;
      }
      const std::string hex = n.substr(prefix.size(), 16);
      if (n.size() != prefix.size() + 16 + std::strlen(kSuffix) || n.compare(prefix.size() + 16, std::string::npos, kSuffix) != 0 ||
          hex.find_first_not_of("0123456789abcdef") != std::string::npos || ::stat(path.c_str(), &st) != 0)
        continue;
      const uint64_t hash = std::stoull(hex, nullptr, 16);
      index[hash] = Entry{int64_t(st.st_size), 0, true};
      bytes_used += int64_t(st.st_size);
      found.emplace_back(int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, hash);
    }
    closedir(d);
    std::sort(found.begin(), found.end());
    for (const auto& [mtime, hash] : found) index[hash].last_used = ++clock;
  }

  // Removes least recently used written files while over budget (caller holds mu).
  void enforce_budget() {
    while (bytes_used > max_bytes) {
      auto victim = index.end();
      for (auto it = index.begin(); it != index.end(); ++it)
        if (it->second.written && (victim == index.end() || it->second.last_used < victim->second.last_used))
          victim = it;
      if (victim == index.end()) return;
      ::unlink(file_of(victim->first).c_str());
      bytes_used -= victim->second.bytes;
      index.erase(victim);
      ++evictions;
    }
  }

  // Queues a page: from kv's page, or page_bytes of data.
  bool put(const int32_t* ids, int32_t n, uint64_t hash, const KvCache* kv, const int32_t* page, const uint8_t* data) {
    if (n <= 0 || n > max_ids || max_bytes <= 0) return false;
    int32_t j;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (index.count(hash)) return false;
      if (free_jobs.empty()) {
        ++dropped;
        return false;
      }
      j = free_jobs.back();
      free_jobs.pop_back();
      index[hash] = Entry{0, ++clock, false};
    }
    Job& job = jobs[size_t(j)];  // this thread's alone until queued
    job.ids.assign(ids, ids + n);
    job.hash = hash;
    if (kv)
      kv->read_page(page, job.data.data());
    else
      std::memcpy(job.data.data(), data, page_bytes);
    {
      std::lock_guard<std::mutex> lk(mu);
      queue.push_back(j);
    }
    cv_work.notify_one();
    return true;
  }

  void run() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv_work.wait(lk, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, everything written
      const int32_t j = queue.front();
      queue.erase(queue.begin());
      writing = true;
      Job& job = jobs[size_t(j)];
      const std::string file = file_of(job.hash);
      const std::string tmp = file + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++tmp_serial);
      lk.unlock();
      std::string why;
      const bool ok = write_kv_page_file(tmp, identity, job.ids.data(), int32_t(job.ids.size()), job.data.data(),
                                         job.data.size(), why) &&
                      ::rename(tmp.c_str(), file.c_str()) == 0;
      if (!ok) ::unlink(tmp.c_str());
      struct stat st{};
      const int64_t size = ok && ::stat(file.c_str(), &st) == 0 ? int64_t(st.st_size) : 0;
      lk.lock();
      auto it = index.find(job.hash);
      if (ok && it != index.end()) {
        it->second.written = true;
        it->second.bytes = size;
        bytes_used += size;
        ++writes;
        enforce_budget();
      } else if (it != index.end()) {
        index.erase(it);  // a disk problem: forget it (a later put may try again)
      }
      free_jobs.push_back(j);
      writing = false;
      if (queue.empty()) cv_idle.notify_all();
    }
  }
};

DiskTier::DiskTier(const std::string& dir, const std::string& identity, size_t page_bytes, int64_t max_bytes,
                   int32_t max_ids)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error("prefix cache dir " + dir + " does not exist or is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw std::runtime_error("prefix cache dir " + dir + " is not writable");
  struct statvfs vfs{};
  const int64_t half_free = ::statvfs(dir.c_str(), &vfs) == 0 ? int64_t(vfs.f_bavail) * int64_t(vfs.f_frsize) / 2 : 0;
  s.dir = dir;
  s.identity = identity;
  s.id_hex = Impl::hex64(fnv1a64(identity.data(), identity.size()));
  s.page_bytes = page_bytes;
  s.max_ids = max_ids;
  s.scan();
  // Files already there count: the budget is theirs too (half of what is free besides them).
  s.max_bytes = std::max<int64_t>(0, std::min(max_bytes, half_free + s.bytes_used));
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.enforce_budget();
  }
  s.jobs.resize(kQueuePages);
  for (int j = 0; j < kQueuePages; ++j) {
    s.jobs[size_t(j)].ids.reserve(size_t(max_ids));
    s.jobs[size_t(j)].data.resize(page_bytes);
    s.free_jobs.push_back(kQueuePages - 1 - j);
  }
  s.queue.reserve(kQueuePages);
  s.writer = std::thread([&s] { s.run(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv_work.notify_all();
  impl_->writer.join();
}

uint64_t DiskTier::prefix_hash(const int32_t* ids, int32_t n) { return fnv1a64(ids, size_t(n) * sizeof(int32_t)); }

bool DiskTier::contains(uint64_t hash) const {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.index.count(hash) > 0) return true;
  // Not written by this lane nor found at start: another lane sharing the directory may have
  // written it since (one stat per page looked up; a damaged file is removed by get()).
  struct stat st{};
  if (::stat(s.file_of(hash).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  s.index[hash] = Impl::Entry{int64_t(st.st_size), ++s.clock, true};
  s.bytes_used += int64_t(st.st_size);
  s.enforce_budget();
  return s.index.count(hash) > 0;
}

bool DiskTier::put(const int32_t* ids, int32_t n, uint64_t hash, const uint8_t* data) {
  return impl_->put(ids, n, hash, nullptr, nullptr, data);
}

bool DiskTier::put(const int32_t* ids, int32_t n, uint64_t hash, const KvCache& kv, const int32_t* page) {
  return impl_->put(ids, n, hash, &kv, page, nullptr);
}

bool DiskTier::get(const int32_t* ids, int32_t n, uint64_t hash, uint8_t* out) {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    const auto it = s.index.find(hash);
    if (it == s.index.end() || !it->second.written) return false;
  }
  const std::string file = s.file_of(hash);
  const bool ok = read_kv_page_file(file, s.identity, ids, n, out, s.page_bytes);
  std::lock_guard<std::mutex> lk(s.mu);
  const auto it = s.index.find(hash);
  if (it == s.index.end()) return ok;  // evicted meanwhile: what was read is still whole
  if (!ok) {
    s.bytes_used -= it->second.bytes;
    s.index.erase(it);
    return false;
  }
  it->second.last_used = ++s.clock;
  ::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // the LRU order survives a restart
  ++s.reads;
  return true;
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->cv_idle.wait(lk, [&] { return impl_->queue.empty() && !impl_->writing; });
}

DiskTierStats DiskTier::stats() const {
  const Impl& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  DiskTierStats st;
  st.bytes_used = s.bytes_used;
  st.max_bytes = s.max_bytes;
  for (const auto& [h, e] : s.index) st.files += e.written;
  st.writes = s.writes;
  st.reads = s.reads;
  st.dropped = s.dropped;
  st.evictions = s.evictions;
  return st;
}

const std::string& DiskTier::dir() const { return impl_->dir; }
const std::string& DiskTier::identity() const { return impl_->identity; }
size_t DiskTier::page_bytes() const { return impl_->page_bytes; }

}  // namespace ls
