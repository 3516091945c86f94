#include "engine/slot_file.h"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "engine/disk_file.h"
#include "model/kv_cache.h"

namespace ls {

namespace {

constexpr char kSlotMagic[8] = {'L', 'S', 'S', 'L', 'O', 'T', 'K', 'V'};
constexpr uint32_t kSlotVersion = 1;

}  // namespace

bool valid_slot_filename(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name)
    if (c == '/' || c == '\\' || c == '\0') return false;
  return true;
}

int64_t write_slot_file(const std::string& path, const std::string& identity, const int32_t* ids, int32_t n_ids,
                        const KvCache& kv, const int32_t* pages, const int32_t* wpages, int32_t n_pages,
                        size_t page_bytes) {
  std::vector<uint8_t> data(size_t(n_pages) * page_bytes);
  for (int32_t j = 0; j < n_pages; ++j) {
    const int32_t page[kMaxKvGroups] = {pages[j], wpages ? wpages[j] : -1};
    kv.read_page(page, data.data() + size_t(j) * page_bytes);
  }
  const Span parts[2] = {{ids, size_t(n_ids) * sizeof(int32_t)}, {data.data(), data.size()}};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const std::string name = std::filesystem::path(path).filename().string();  // messages never show the dir
  std::string why;
  if (!write_checked_file(tmp, kSlotMagic, kSlotVersion, identity, uint64_t(n_ids), parts, 2, why))
    throw std::runtime_error("cannot save the slot to " + name + ": the prefix cache dir could not be written");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot save the slot to " + name + ": the file could not be replaced");
  }
  return int64_t(64 + identity.size() + parts[0].n_bytes + parts[1].n_bytes);
}

SlotFileData read_slot_file(const std::string& path, const std::string& identity, size_t page_bytes, int32_t max_ids) {
  const std::string name = std::filesystem::path(path).filename().string();  // messages never show the dir
  CheckedFile f;
  std::string why;
  if (!f.open(path, kSlotMagic, kSlotVersion, identity, why))
    throw std::runtime_error("cannot restore the slot from " + name + ": " + (why.empty() ? "no such file" : why));
  const uint64_t n_ids = f.count();
  const uint64_t n_pages = (n_ids + kKvPagePositions - 1) / kKvPagePositions;
  if (n_ids == 0 || n_ids > uint64_t(max_ids) || f.body_bytes() != n_ids * sizeof(int32_t) + n_pages * page_bytes)
    throw std::runtime_error("cannot restore the slot from " + name + ": its size does not match this model's K/V "
                             "layout or context");
  SlotFileData d;
  d.ids.resize(size_t(n_ids));
  d.data.resize(size_t(n_pages) * page_bytes);
  d.n_pages = int32_t(n_pages);
  if (!f.read(d.ids.data(), d.ids.size() * sizeof(int32_t)) || !f.read(d.data.data(), d.data.size()) ||
      !f.checksum_ok())
    throw std::runtime_error("cannot restore the slot from " + name + ": the file is corrupt");
  d.file_bytes = int64_t(64 + identity.size() + f.body_bytes());
  return d;
}

}  // namespace ls
