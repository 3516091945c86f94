#include "ring/stress.h"

#include <sched.h>

#include <vector>

namespace ls::ring {

uint32_t crc32(const uint8_t* data, size_t n) {
  static uint32_t table[256];
  static bool ready = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)ready;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint64_t stress_produce(Producer& producer, const Doorbell& bell, uint32_t num_streams, uint32_t records_per_stream,
                        uint64_t seed) {
  std::vector<uint32_t> next_seq(num_streams, 0);
  std::vector<uint32_t> live;
  for (uint32_t s = 0; s < num_streams; ++s) live.push_back(s);
  uint64_t x = seed | 1, full_count = 0;
  uint8_t body[256];
  while (!live.empty()) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64: random interleaving of streams
    const size_t pick = size_t(x % live.size());
    const uint32_t stream = live[pick], seq = next_seq[stream];
    const uint32_t body_len = (stream * 7 + seq) % 193;
    for (uint32_t i = 0; i < body_len; ++i) body[i] = uint8_t(stream * 31 + seq * 7 + i);
    const uint32_t head[3] = {stream, seq, crc32(body, body_len)};
    const Piece pieces[2] = {{head, sizeof head}, {body, body_len}};
    while (!producer.try_write(kStressType, pieces, 2)) {
      ++full_count;
      if (producer.take_bell()) bell.ring();
      sched_yield();
    }
    if (producer.take_bell()) bell.ring();
    if (++next_seq[stream] == records_per_stream) {
      live[pick] = live.back();
      live.pop_back();
    }
  }
  while (!producer.try_write(kStressEndType, nullptr, 0)) sched_yield();
  if (producer.take_bell()) bell.ring();
  return full_count;
}

}  // namespace ls::ring
