#include "engine/disk_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "model/repack_store.h"

namespace ls {

namespace {

// On-disk header (native little-endian: the files never leave the machine that wrote them).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t identity_bytes;
  uint64_t count;
  uint64_t body_bytes;
  uint64_t checksum;  // chain() over the body's parts
  uint8_t reserved[24];
};
static_assert(sizeof(Header) == 64, "64-byte header");

constexpr uint32_t kMaxIdentityBytes = 1 << 16;
constexpr uint64_t kChecksumSeed = 0x6c736b7663686b31ull;

// The body's checksum, one part at a time (repack_checksum reads 32 bytes per round: a 1.4 MB page
// costs well under a millisecond).
uint64_t chain(uint64_t h, const void* data, size_t n_bytes) {
  return (h ^ repack_checksum(static_cast<const uint8_t*>(data), n_bytes)) * 0x9E3779B185EBCA87ull + n_bytes;
}

}  // namespace

bool write_checked_file(const std::string& path, const char magic[8], uint32_t version, const std::string& identity,
                        uint64_t count, const Span* parts, size_t n_parts, std::string& why) {
  Header h{};
  std::memcpy(h.magic, magic, 8);
  h.version = version;
  h.identity_bytes = uint32_t(identity.size());
  h.count = count;
  h.checksum = kChecksumSeed;
  for (size_t i = 0; i < n_parts; ++i) {
    h.body_bytes += parts[i].n_bytes;
    h.checksum = chain(h.checksum, parts[i].data, parts[i].n_bytes);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    why = "create " + path + ": " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(&h, sizeof h, 1, f) == 1 && std::fwrite(identity.data(), 1, identity.size(), f) == identity.size();
  for (size_t i = 0; ok && i < n_parts; ++i)
    ok = std::fwrite(parts[i].data, 1, parts[i].n_bytes, f) == parts[i].n_bytes;
  ok = std::fflush(f) == 0 && ok;
  if (!ok) why = "write " + path + ": " + std::strerror(errno);
  ok = std::fclose(f) == 0 && ok;
  if (!ok) ::unlink(path.c_str());
  return ok;
}

CheckedFile::~CheckedFile() {
  if (f_) std::fclose(f_);
}

bool CheckedFile::open(const std::string& path, const char magic[8], uint32_t version, const std::string& identity,
                       std::string& why) {
  why.clear();
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) {
    if (errno != ENOENT) why = std::strerror(errno);
    return false;
  }
  Header h{};
  if (std::fread(&h, sizeof h, 1, f_) != 1 || std::memcmp(h.magic, magic, 8) != 0 || h.version != version ||
      h.identity_bytes != identity.size() || h.identity_bytes > kMaxIdentityBytes) {
    why = "not a file of this kind, version or model";
    return false;
  }
  char buf[256];
  for (size_t off = 0; off < identity.size();) {  // compared in pieces: no allocation
    const size_t k = std::min(sizeof buf, identity.size() - off);
    if (std::fread(buf, 1, k, f_) != k || std::memcmp(buf, identity.data() + off, k) != 0) {
      why = "written for another model file or K/V layout";
      return false;
    }
    off += k;
  }
  const long body_at = std::ftell(f_);
  if (std::fseek(f_, 0, SEEK_END) != 0 || uint64_t(std::ftell(f_) - body_at) != h.body_bytes ||
      std::fseek(f_, body_at, SEEK_SET) != 0) {
    why = "truncated or too long";
    return false;
  }
  count_ = h.count;
  body_bytes_ = h.body_bytes;
  expect_checksum_ = h.checksum;
  checksum_ = kChecksumSeed;
  read_bytes_ = 0;
  return true;
}

bool CheckedFile::read(void* out, size_t n_bytes) {
  if (!f_ || read_bytes_ + n_bytes > body_bytes_ || std::fread(out, 1, n_bytes, f_) != n_bytes) return false;
  checksum_ = chain(checksum_, out, n_bytes);
  read_bytes_ += n_bytes;
  return true;
}

bool CheckedFile::checksum_ok() const { return read_bytes_ == body_bytes_ && checksum_ == expect_checksum_; }

}  // namespace ls
