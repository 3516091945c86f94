// Test-only producer for the ring stress test: numbered, checksummed records from many
// interleaved streams, written as fast as the ring allows. Record layout (type kStressType):
//   u32 stream, u32 seq, u32 crc32(body), body[(stream*7 + seq) % 193] with
//   body[i] = (stream*31 + seq*7 + i) & 0xFF.  Ends with one kStressEndType record.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ring/doorbell.h"
#include "ring/ring.h"

namespace ls::ring {

constexpr uint32_t kStressType = 100;
constexpr uint32_t kStressEndType = 101;

uint32_t crc32(const uint8_t* data, size_t n);
// Returns the number of times the producer found the ring full.
uint64_t stress_produce(Producer& producer, const Doorbell& bell, uint32_t num_streams, uint32_t records_per_stream,
                        uint64_t seed);

}  // namespace ls::ring
