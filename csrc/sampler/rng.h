// Per-generation RNG for the sampler: a fixed, documented algorithm so that a seeded
// generation draws the same numbers on every run, build and thread count.
//   state init : splitmix64 applied 4x to the 64-bit seed (the xoshiro authors' recommendation)
//   generator  : xoshiro256** 1.0 (Blackman & Vigna)
//   uniform    : top 53 bits of one output * 2^-53  → double in [0, 1)
// std::uniform_real_distribution is avoided on purpose: its output is implementation-defined.
#pragma once

#include <cstdint>

namespace ls {

class Xoshiro256ss {
 public:
  explicit Xoshiro256ss(uint64_t seed = 0) { seed_with(seed); }

  void seed_with(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& w : s_) w = splitmix64(x);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

}  // namespace ls
