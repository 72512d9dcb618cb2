// The lean formats' random numbers (optim/lean_adamw.h): 32 bits as a hash of (seed, step, element
// index, purpose), so that a number depends on no thread split, schedule or tier. The hash is split
// in two: random_key mixes what is the same for a whole step (seed, step), random_bits the element,
// one splitmix64 finalizer per element, which the block kernel (optim/lean_kernel.cpp) runs on
// vector lanes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::lean {

// splitmix64's finalizer: a bijection that scatters every input bit over the output.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

inline uint64_t random_key(uint64_t seed, int64_t step) {
  const uint64_t h = mix64(seed ^ 0x9e3779b97f4a7c15ull);
  return mix64(h ^ static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ull);
}

// `purpose` < 4 tells apart the numbers one element draws in one step.
inline uint32_t random_bits(uint64_t key, uint64_t index, uint32_t purpose) {
  return static_cast<uint32_t>(mix64(key ^ (index << 2 | purpose)) >> 32);
}

// The top 24 bits as a uniform float in [0, 1).
inline float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}

}  // namespace ferry::lean
