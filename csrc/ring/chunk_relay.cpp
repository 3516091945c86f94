#include "ring/chunk_relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ring/wire.h"

namespace ls::ring {

namespace {
char kCrlf[] = "\r\n";
}

ChunkRelay::Result ChunkRelay::relay(Consumer& consumer, int bell_fd, int sock_fd, uint64_t request_id,
                                     size_t max_records) {
  Result out;
  // 1. The doorbell is level-triggered for the event loop: reset it before reading, so a
  //    delta published after this point rings again (the producer rings only when armed).
  if (bell_fd >= 0) {
    uint64_t count;
    while (::read(bell_fd, &count, sizeof count) < 0 && errno == EINTR) {
    }
  }
  // 2. Collect.
  num_iov_ = 0;
  sent_bytes_ = 0;
  size_t visited = 0;
  size_t total_bytes = 0;
  end_pos_ = consumer.peek(max_records, [&](uint32_t type, const uint8_t* p, size_t n) {
    ++visited;
    // Anything but a well-formed DELTA goes back to the caller's decoder (which also reports a
    // malformed delta as a protocol error).
    if (type != uint32_t(ls::wire::RecordType::Delta) || n < sizeof(ls::wire::DeltaHeader)) {
      out.control_type = type;
      out.control = p;
      out.control_bytes = n;
      return false;
    }
    uint64_t rid;
    std::memcpy(&rid, p + offsetof(ls::wire::DeltaHeader, request_id), sizeof rid);
    const size_t event_bytes = n - sizeof(ls::wire::DeltaHeader);
    if (rid != request_id || event_bytes == 0) return true;  // stale, or nothing (a 0 chunk ends HTTP bodies)
    char* h = headers_[out.num_deltas];
    const int h_len = std::snprintf(h, kChunkHeaderBytes, "%zx\r\n", event_bytes);
    iov_[num_iov_++] = {h, size_t(h_len)};
    iov_[num_iov_++] = {const_cast<uint8_t*>(p + sizeof(ls::wire::DeltaHeader)), event_bytes};
    iov_[num_iov_++] = {kCrlf, 2};
    total_bytes += size_t(h_len) + event_bytes + 2;
    return ++out.num_deltas < kMaxDeltas;
  });
  out.full = out.control == nullptr && (visited == max_records || out.num_deltas == kMaxDeltas);
  // 3. Send: one syscall for the batch; never blocks (the event loop owns waiting).
  if (num_iov_) {
    msghdr msg{};
    msg.msg_iov = iov_;
    msg.msg_iovlen = num_iov_;
    ssize_t sent;
    do {
      sent = ::sendmsg(sock_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) out.send_errno = errno;
      sent = 0;
    }
    sent_bytes_ = size_t(sent);
    out.unsent_bytes = out.send_errno ? 0 : total_bytes - sent_bytes_;
  }
  return out;
}

void ChunkRelay::copy_unsent(uint8_t* dst) const {
  size_t skip = sent_bytes_;
  for (size_t i = 0; i < num_iov_; ++i) {
    const size_t len = iov_[i].iov_len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    const size_t take = len - skip;
    std::memcpy(dst, static_cast<const uint8_t*>(iov_[i].iov_base) + skip, take);
    dst += take;
    skip = 0;
  }
}

}  // namespace ls::ring
