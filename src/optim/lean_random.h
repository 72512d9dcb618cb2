// The lean formats' random numbers (optim/lean_adamw.h): 32 bits per element and step as a hash of
// (seed, step, element index), so that a number depends on no thread split, schedule or tier. The
// hash is split in two: random_key mixes what is the same for a whole step (seed, step) with
// splitmix64, once per step; random_bits the element, with one 32-bit integer hash (two 32-bit
// multiplies), which the block kernel (optim/lean_kernel.cpp) runs on vector lanes: a 64-bit hash
// per element costs AVX2, which has no 64-bit lane multiply, several times as much.
//
// One element's 32 bits feed both of its roundings: the low 16 bits round the master (bf16sr_q8's
// 16 dropped bits, bf16c8_q8's compensation), the high 16 bits round sqrt(v)'s code.
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

// The 32-bit key of the elements whose indices share their high 32 bits (a block of kStateBlock
// elements never straddles two such spans): the step's key for the first 2^32 elements of a unit.
inline uint32_t span_key(uint64_t key, uint64_t index) {
  const uint64_t high = index >> 32;
  return static_cast<uint32_t>(high == 0 ? key : mix64(key + high));
}

// A bijection of 32 bits with full avalanche (two multiply-xorshift rounds; the constants of
// C. Wellons' "lowbias32").
inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// The 32 random bits of element `index` in the step whose key gave `span` (span_key).
inline uint32_t random_bits(uint32_t span, uint64_t index) {
  return hash32(static_cast<uint32_t>(index) ^ span);
}

// The two purposes' 16 bits of an element's 32: 0, the master's rounding; 1, v's.
inline uint32_t purpose_bits(uint32_t bits, uint32_t purpose) {
  return purpose == 0 ? bits & 0xffffu : bits >> 16;
}

// 16 random bits as a uniform number in (0, 1): the midpoints (2k + 1) / 2^17, so that a rounding
// that adds it below a grid of 2^-8 (the compensation) is exactly unbiased and one below a finer
// grid (v's 19 dropped bits) is unbiased to within 2^-17 of a code step.
inline float uniform_from_bits16(uint32_t bits16) {
  return static_cast<float>(static_cast<int32_t>(2 * bits16 + 1)) * 0x1p-17f;
}

}  // namespace ferry::lean
