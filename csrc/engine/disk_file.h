// Checked cache files (private to engine/disk_tier.cpp and engine/slot_file.cpp): a 64-byte header
// (magic, version, identity length, a count, body bytes, a checksum of the body) and the
// identity text, then the body. Written `<path>` directly by the caller's choice of name (the
// callers write temp names and rename). The body is written in parts and must be read back in
// the same parts (one read() per part): the checksum chains each part's repack_checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ls {

struct Span {
  const void* data;
  size_t n_bytes;
};

// Writes the header, identity and the parts as the body, fsync'd; false and why on failure
// (the partial file is removed).
bool write_checked_file(const std::string& path, const char magic[8], uint32_t version, const std::string& identity,
                        uint64_t count, const Span* parts, size_t n_parts, std::string& why);

// Reads a checked file's body in order. open(): false with why empty when the file is absent,
// why set when it is not of this magic/version/identity or is shorter than its header says.
class CheckedFile {
 public:
  CheckedFile() = default;
  ~CheckedFile();
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  bool open(const std::string& path, const char magic[8], uint32_t version, const std::string& identity,
            std::string& why);
  uint64_t count() const { return count_; }
  uint64_t body_bytes() const { return body_bytes_; }
  bool read(void* out, size_t n_bytes);  // the next part of the body, n_bytes long (checksummed as read)
  bool checksum_ok() const;              // after the whole body was read

 private:
  std::FILE* f_ = nullptr;
  uint64_t count_ = 0, body_bytes_ = 0, read_bytes_ = 0, checksum_ = 0, expect_checksum_ = 0;
};

}  // namespace ls
