#include "ring/ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace ls::ring {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

Mapping::Mapping(int fd, size_t size_bytes) : size_bytes_(size_bytes) {
  void* p = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw RingError(std::string("mmap of ring segment failed: ") + std::strerror(errno));
  base_ = static_cast<uint8_t*>(p);
}

Mapping::~Mapping() {
  if (base_) munmap(base_, size_bytes_);
}

static bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

size_t segment_bytes_for(uint64_t capacity_bytes) {
  if (!is_pow2(capacity_bytes) || capacity_bytes < kMinCapacityBytes)
    throw RingError("ring capacity must be a power of two >= 4096, got " + std::to_string(capacity_bytes));
  return kSegmentHeaderBytes + capacity_bytes;
}

uint64_t format_segment(int fd, size_t segment_bytes) {
  if (segment_bytes < kSegmentHeaderBytes + kMinCapacityBytes)
    throw RingError("ring segment too small: " + std::to_string(segment_bytes) + " bytes");
  uint64_t capacity = 1;
  while (capacity * 2 <= segment_bytes - kSegmentHeaderBytes) capacity *= 2;
  // tmpfs allocates pages lazily; a full /dev/shm would SIGBUS us on first touch. Reserve now.
  int rc = posix_fallocate(fd, 0, off_t(segment_bytes));
  if (rc != 0)
    throw RingError(std::string("cannot reserve ") + std::to_string(segment_bytes) +
                    " bytes in /dev/shm for a ring: " + std::strerror(rc));
  Mapping m(fd, segment_bytes);
  std::memset(m.data(), 0, kSegmentHeaderBytes);
  auto* h = new (m.data()) SegmentHeader();
  h->capacity_bytes = capacity;
  h->max_record_bytes = capacity / 4;
  h->creator_pid = uint32_t(getpid());
  h->tail.store(0, std::memory_order_relaxed);
  h->head.store(0, std::memory_order_relaxed);
  h->version = kVersion;
  // Magic last, released: an attacher whose acquire load (RingView) sees it sees a complete
  // header. A release store on the word itself rather than a fence before a plain store: the
  // reader needs an atomic load to pair with, and TSan models atomic operations, not fences.
  // (The header keeps a plain uint32_t: the gcc/clang builtin is std::atomic_ref before C++20.)
  __atomic_store_n(&h->magic, kMagic, __ATOMIC_RELEASE);
  return capacity;
}

RingView::RingView(int fd, size_t segment_bytes) : mapping_(std::make_shared<Mapping>(fd, segment_bytes)) {
  hdr_ = reinterpret_cast<SegmentHeader*>(mapping_->data());
  data_ = mapping_->data() + kSegmentHeaderBytes;
  // Pairs with the release store in format_segment().
  if (__atomic_load_n(&hdr_->magic, __ATOMIC_ACQUIRE) != kMagic) throw RingError("not a laneserve ring segment (bad magic)");
  if (hdr_->version != kVersion)
    throw RingError("ring version mismatch: segment has " + std::to_string(hdr_->version) + ", code expects " +
                    std::to_string(kVersion));
  capacity_bytes_ = hdr_->capacity_bytes;
  max_record_bytes_ = hdr_->max_record_bytes;
  if (!is_pow2(capacity_bytes_) || kSegmentHeaderBytes + capacity_bytes_ > segment_bytes ||
      max_record_bytes_ > capacity_bytes_ / 2 || max_record_bytes_ < 64)
    throw RingError("ring header is inconsistent with the segment size");
}

static void claim(std::atomic<uint32_t>& slot, const char* role) {
  uint32_t expected = 0;
  const uint32_t me = uint32_t(getpid());
  if (!slot.compare_exchange_strong(expected, me, std::memory_order_acq_rel) && expected != me)
    throw RingError(std::string("ring already has a ") + role + " (pid " + std::to_string(expected) + ")");
}

static void release_claim(std::atomic<uint32_t>& slot) {
  uint32_t me = uint32_t(getpid());
  slot.compare_exchange_strong(me, 0, std::memory_order_acq_rel);
}

Producer::Producer(RingView view) : view_(std::move(view)) {
  claim(view_.header()->writer_pid, "writer");
  tail_ = view_.header()->tail.load(std::memory_order_acquire);
  head_cache_ = view_.header()->head.load(std::memory_order_acquire);
}

Producer::~Producer() { release_claim(view_.header()->writer_pid); }

bool Producer::try_write(uint32_t type, const Piece* pieces, size_t num_pieces) {
  size_t payload = 0;
  for (size_t i = 0; i < num_pieces; ++i) payload += pieces[i].size_bytes;
  const size_t length = kRecordHeaderBytes + payload;
  if (length > view_.max_record_bytes())
    throw RingError("record of " + std::to_string(length) + " bytes exceeds the ring maximum of " +
                    std::to_string(view_.max_record_bytes()));
  const uint64_t cap = view_.capacity_bytes();
  const size_t total = align_record(length);
  uint64_t off = tail_ & (cap - 1);
  const size_t to_end = size_t(cap - off);
  const size_t needed = total + (to_end < total ? to_end : 0);
  if (tail_ + needed - head_cache_ > cap) {
    head_cache_ = view_.header()->head.load(std::memory_order_acquire);
    if (tail_ + needed - head_cache_ > cap) return false;
  }
  uint8_t* data = view_.data();
  uint64_t pos = tail_;
  if (to_end < total) {  // PAD to the end; to_end is a multiple of 8 and ≥ 8
    const uint32_t pad_len = uint32_t(to_end), pad_type = kPadType;
    std::memcpy(data + off, &pad_len, 4);
    std::memcpy(data + off + 4, &pad_type, 4);
    pos += to_end;
    off = 0;
  }
  const uint32_t len32 = uint32_t(length);
  std::memcpy(data + off, &len32, 4);
  std::memcpy(data + off + 4, &type, 4);
  uint8_t* dst = data + off + kRecordHeaderBytes;
  for (size_t i = 0; i < num_pieces; ++i) {
    if (pieces[i].size_bytes) std::memcpy(dst, pieces[i].data, pieces[i].size_bytes);
    dst += pieces[i].size_bytes;
  }
  tail_ = pos + total;
  view_.header()->tail.store(tail_, std::memory_order_release);  // publishes header + payload
  return true;
}

bool Producer::take_bell() {
  // Pairs with the exchange in Consumer::arm(): either we see reader_waiting == 1, or the
  // consumer's re-check of tail sees our record — never both missed. Both sides read-modify-write
  // the one word, so the two exchanges are ordered in its modification order. If ours comes
  // first, the consumer's exchange reads our write (or a later one of ours): our release
  // synchronizes with its acquire, so our tail store (try_write, before this call) happens-before
  // its tail load, which then sees the record. If the consumer's comes first, we read its 1.
  // (This replaces a seq_cst fence on each side, same guarantee, which TSan does not model.)
  return view_.header()->reader_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

Consumer::Consumer(RingView view) : view_(std::move(view)) {
  claim(view_.header()->reader_pid, "reader");
  head_ = view_.header()->head.load(std::memory_order_acquire);
}

Consumer::~Consumer() { release_claim(view_.header()->reader_pid); }

bool Consumer::arm() {
  // An exchange, not a store: see Producer::take_bell() for why both sides read-modify-write.
  view_.header()->reader_waiting.exchange(1, std::memory_order_acq_rel);
  return view_.header()->tail.load(std::memory_order_acquire) != head_;
}

void Consumer::corrupt(uint64_t pos, uint32_t length, uint32_t type) const {
  throw RingError("corrupt ring record at position " + std::to_string(pos) + " (length " + std::to_string(length) +
                  ", type " + std::to_string(type) + ")");
}

}  // namespace ls::ring
