// SPSC byte ring over one POSIX shared-memory segment (layout below).
//
// The segment starts with SegmentHeader (kSegmentHeaderBytes) followed by `capacity_bytes`
// (a power of two) of record data. Positions are u64 byte counts that only grow; the offset of
// a position is `pos & (capacity - 1)`. Every record is {u32 length, u32 type} + payload, padded
// to 8 bytes; a record never straddles the end: a PAD record fills the tail and the record
// starts at offset 0. The producer publishes with `tail.store(release)` after copying; the
// consumer copies records out, then `head.store(release)`. Python never touches these indices.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace ls::ring {

constexpr uint32_t kMagic = 0x474E524Cu;   // "LRNG" little-endian
constexpr uint32_t kVersion = 6;  // 6: sliding-window layers' K/V pages in STATS; 5: K/V pages, disk tier
constexpr size_t kCacheLineBytes = 128;    // two 64-B lines: adjacent-line prefetch pairs them
constexpr size_t kSegmentHeaderBytes = 512;
constexpr size_t kRecordAlignBytes = 8;
constexpr size_t kRecordHeaderBytes = 8;
constexpr size_t kMinCapacityBytes = 4096;
constexpr uint32_t kPadType = 0;           // reserved record type (wire.h repeats it as RecordType::Pad)

static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "cross-process atomics must be lock-free");

struct SegmentHeader {
  // Line 0: written once by the creator, read-only afterwards.
  uint32_t magic;
  uint32_t version;
  uint64_t capacity_bytes;
  uint64_t max_record_bytes;
  uint32_t creator_pid;
  uint32_t reserved0;
  uint8_t pad0[kCacheLineBytes - 32];
  // Line 1: producer-owned.
  alignas(kCacheLineBytes) std::atomic<uint64_t> tail;
  // Line 2: consumer-owned.
  alignas(kCacheLineBytes) std::atomic<uint64_t> head;
  // Line 3: handshake and liveness words, written rarely.
  alignas(kCacheLineBytes) std::atomic<uint32_t> reader_waiting;  // consumer armed the doorbell
  std::atomic<uint32_t> closed;
  std::atomic<uint64_t> heartbeat_ns;    // producer's CLOCK_MONOTONIC at its last loop pass
  std::atomic<uint64_t> quiet_until_ns;  // producer expects no heartbeat before this (long prefill)
  std::atomic<uint32_t> writer_pid;      // claimed by compare-and-swap: enforces one producer
  std::atomic<uint32_t> reader_pid;      // ... and one consumer
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes, "header must fit its reserved bytes");

class RingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr size_t align_record(size_t n) { return (n + kRecordAlignBytes - 1) & ~(kRecordAlignBytes - 1); }

uint64_t monotonic_ns();

// An mmap of a shared-memory fd; the fd may be closed once this exists.
class Mapping {
 public:
  Mapping(int fd, size_t size_bytes);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const { return base_; }
  size_t size_bytes() const { return size_bytes_; }

 private:
  uint8_t* base_ = nullptr;
  size_t size_bytes_ = 0;
};

// Reserves tmpfs pages (ENOSPC → RingError rather than SIGBUS on first touch) and writes a fresh
// header. Capacity = largest power of two that fits after the header. Returns capacity_bytes.
uint64_t format_segment(int fd, size_t segment_bytes);
// Segment size that yields `capacity_bytes` of data (capacity must be a power of two ≥ 4096).
size_t segment_bytes_for(uint64_t capacity_bytes);

// Validated view of a formatted segment; shared by one Producer or Consumer.
class RingView {
 public:
  RingView(int fd, size_t segment_bytes);
  SegmentHeader* header() const { return hdr_; }
  uint8_t* data() const { return data_; }
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t max_record_bytes() const { return max_record_bytes_; }

 private:
  std::shared_ptr<Mapping> mapping_;
  SegmentHeader* hdr_;
  uint8_t* data_;
  uint64_t capacity_bytes_;
  uint64_t max_record_bytes_;
};

struct Piece {
  const void* data;
  size_t size_bytes;
};

class Producer {
 public:
  explicit Producer(RingView view);  // claims writer_pid; throws RingError if another process holds it
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Largest payload a single record can carry.
  size_t max_payload_bytes() const { return view_.max_record_bytes() - kRecordHeaderBytes; }
  // Copies one record (payload = concatenated pieces) and publishes it. False if the ring lacks
  // space right now (nothing written). Throws RingError if the payload can never fit.
  bool try_write(uint32_t type, const Piece* pieces, size_t num_pieces);
  // Dekker handshake, producer half: after publishing, true iff the consumer was armed (and is
  // now disarmed) — ring its doorbell exactly then.
  bool take_bell();
  void heartbeat(uint64_t now_ns) { view_.header()->heartbeat_ns.store(now_ns, std::memory_order_relaxed); }
  void set_quiet_until(uint64_t t_ns) { view_.header()->quiet_until_ns.store(t_ns, std::memory_order_relaxed); }
  void close() { view_.header()->closed.store(1, std::memory_order_release); }
  const RingView& view() const { return view_; }

 private:
  RingView view_;
  uint64_t tail_;        // private copy of the published tail
  uint64_t head_cache_;  // last head seen; refreshed only when the ring looks full
};

class Consumer {
 public:
  explicit Consumer(RingView view);  // claims reader_pid
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // Calls on_record(type, const uint8_t* payload, size_t payload_bytes) for up to max_records
  // records (PAD skipped), then releases their space with one head store. on_record must copy
  // what it keeps. Returns the number of records delivered. Throws RingError on a corrupt header.
  template <class F>
  size_t read(size_t max_records, F&& on_record);
  // Like read() without releasing anything: on_record returns false to stop after that record.
  // Payload pointers stay valid until commit(); returns the position after the last visited
  // record (pass it to commit). Lets a caller hand ring memory to the kernel (sendmsg) uncopied.
  template <class F>
  uint64_t peek(size_t max_records, F&& on_record) const;
  void commit(uint64_t pos) {
    if (pos != head_) {
      head_ = pos;
      view_.header()->head.store(pos, std::memory_order_release);  // pairs with the producer's acquire
    }
  }
  // Dekker handshake, consumer half: arm the doorbell, then report whether data is already
  // there (if so, do not sleep: read again).
  bool arm();
  bool has_data() const { return view_.header()->tail.load(std::memory_order_acquire) != head_; }
  uint64_t heartbeat_ns() const { return view_.header()->heartbeat_ns.load(std::memory_order_relaxed); }
  uint64_t quiet_until_ns() const { return view_.header()->quiet_until_ns.load(std::memory_order_relaxed); }
  bool closed() const { return view_.header()->closed.load(std::memory_order_acquire) != 0; }
  const RingView& view() const { return view_; }

 private:
  [[noreturn]] void corrupt(uint64_t pos, uint32_t length, uint32_t type) const;
  RingView view_;
  uint64_t head_;
};

template <class F>
uint64_t Consumer::peek(size_t max_records, F&& on_record) const {
  const uint64_t tail = view_.header()->tail.load(std::memory_order_acquire);
  const uint64_t mask = view_.capacity_bytes() - 1;
  const uint8_t* data = view_.data();
  uint64_t pos = head_;
  size_t delivered = 0;
  while (pos != tail && delivered < max_records) {
    const uint64_t off = pos & mask;
    uint32_t length, type;
    __builtin_memcpy(&length, data + off, 4);
    __builtin_memcpy(&type, data + off + 4, 4);
    if (length < kRecordHeaderBytes || off + length > view_.capacity_bytes() || pos + length > tail)
      corrupt(pos, length, type);
    pos += align_record(length);
    if (type != kPadType) {
      ++delivered;
      if (!on_record(type, data + off + kRecordHeaderBytes, size_t(length) - kRecordHeaderBytes)) break;
    }
  }
  return pos;
}

template <class F>
size_t Consumer::read(size_t max_records, F&& on_record) {
  size_t delivered = 0;
  commit(peek(max_records, [&](uint32_t type, const uint8_t* p, size_t n) {
    on_record(type, p, n);
    ++delivered;
    return true;
  }));
  return delivered;
}

}  // namespace ls::ring
