// Deterministic random numbers that do not depend on the C++ library's distributions
// (those are implementation-defined), so a seed gives the same model and data everywhere.
#pragma once
#include <cmath>
#include <cstdint>

namespace lct {

// SplitMix64 finaliser: a good 64-bit mixer, used for seeding and counter-based draws.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 53 bits.
inline double to_unit(uint64_t x) { return double(x >> 11) * 0x1.0p-53; }

// Counter-based standard normal: draw `index` of stream `stream` under `seed`. Any thread
// can compute any element, so parallel initialisation is independent of the thread count.
inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t base = mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ull));
  const double u1 = to_unit(mix64(base ^ (2 * index))) + 0x1.0p-54;  // (0, 1): log is finite
  const double u2 = to_unit(mix64(base ^ (2 * index + 1)));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// xoshiro256**: a sequential stream (data generation, sampling). State is 4 words so it can
// be saved in a checkpoint and restored bit-exactly.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream = 0) {
    uint64_t x = seed ^ mix64(stream);
    for (auto& w : s_) w = x = mix64(x);
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
  double uniform() { return to_unit(next()); }
  // Uniform integer in [0, n) by Lemire's multiply-shift (bias below 2^-64 * n).
  uint64_t below(uint64_t n) { return uint64_t((__uint128_t(next()) * n) >> 64); }
  const uint64_t* state() const { return s_; }
  void set_state(const uint64_t* s) {
    for (int i = 0; i < 4; ++i) s_[i] = s[i];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace lct
