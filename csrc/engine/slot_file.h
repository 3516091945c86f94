// Slot files: llama-server's `POST /slots/{id}?action=save|restore` for laneserve — one
// sequence's cached K/V pages and key ids in a file of the prefix-cache dir (BatchEngine::save_slot,
// restore_slot).
//
// File: SlotFileHeader (magic, version, the identity text as in engine/disk_tier.h, n_tokens,
// n_pages, page bytes, checksum of everything after the header), n_tokens int32 key ids, then
// n_pages whole pages (KvCache::read_page; the last one may be partly filled: only its first
// n_tokens - (n_pages - 1)·P positions mean anything). Written tmp + rename. A read checks all of
// it and throws on anything else. Control operations, not the token loop: they allocate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls {

class KvCache;

// A plain file name: non-empty, no '/', '\\' or NUL, not "." or "..", at most 255 bytes.
bool valid_slot_filename(const std::string& name);

// Writes pages[0, n_pages) of kv (with wpages[0, n_pages) of its window group, -1: zeros; null:
// one group) and ids[0, n_ids) to path; returns the file's bytes. Throws std::runtime_error naming the file.
int64_t write_slot_file(const std::string& path, const std::string& identity, const int32_t* ids, int32_t n_ids,
                        const KvCache& kv, const int32_t* pages, const int32_t* wpages, int32_t n_pages,
                        size_t page_bytes);

struct SlotFileData {
  std::vector<int32_t> ids;   // [n_tokens]
  std::vector<uint8_t> data;  // [n_pages][page_bytes]
  int32_t n_pages = 0;
  int64_t file_bytes = 0;
};
// Reads and checks path against identity and page_bytes (at most max_ids ids). Throws
// std::runtime_error naming the file and the problem.
SlotFileData read_slot_file(const std::string& path, const std::string& identity, size_t page_bytes, int32_t max_ids);

}  // namespace ls
