// Loops over float arrays that the compiler vectorises while keeping the result bit-exact and
// independent of the vector width: elementwise math only, and reductions over a fixed number of
// lanes combined in a fixed order. No FMA contraction is possible (the code is built for baseline
// x86-64 or, through target_clones, for targets without FMA), so every machine gets the same bits.
#pragma once

#include <bit>
#include <cstdint>

// Hot kernels are compiled for AVX2 beside the baseline and picked at load time. GCC's avx2 target
// does not enable FMA, and the loops here are elementwise or fixed-lane, so both clones return the
// same bits. (No avx512f clone: GCC's avx512f target implies FMA, which would contract a*b+c and
// make the results depend on the machine.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FERRY_NO_CLONES)
#define FERRY_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FERRY_VECTOR_CLONES
#endif

namespace ferry::cpu {

// x[i] = exp(x[i]) for i < n, within 1 ulp of the correctly rounded value over [-87.3, 88.3]
// (tested against double exp in ops_vec_math_test). exp(x) = 2^k * exp(r), k = round(x / ln2),
// |r| <= ln2 / 2, with exp(r) from its degree-7 Taylor polynomial (truncation below 3e-9
// relative). Below -87.3 the result is 0 (no subnormals), above 88.3 it is exp(88.3); NaN stays
// NaN.
//
// The range tests and selects work on the float's bits with integer masks: a float compare or a
// ?: lets GCC branch around float arithmetic that may trap (-ftrapping-math), and the loop would
// not vectorise.
inline void exp_inplace(float* x, int64_t n) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln2 split so k * kLn2Hi is exact for |k| <= 128
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;                          // 1.5 * 2^23: adding it rounds to an integer
  constexpr uint32_t kLoBits = std::bit_cast<uint32_t>(-87.3f);  // negatives: unsigned order = magnitude
  constexpr int32_t kHiBits = std::bit_cast<int32_t>(88.3f);     // positives: signed order = value
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    // All-ones masks: below the range (or a NaN with the sign bit), above it (or a NaN), NaN.
    const uint32_t tiny = 0u - static_cast<uint32_t>(u > kLoBits);
    const uint32_t huge = 0u - static_cast<uint32_t>(static_cast<int32_t>(u) > kHiBits);
    const uint32_t nan = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
    const uint32_t clamped = (u & ~tiny & ~huge) | (kLoBits & tiny) | (static_cast<uint32_t>(kHiBits) & huge);
    const float c = std::bit_cast<float>(clamped);
    const float k = (c * kLog2e + kRound) - kRound;
    const float r = (c - k * kLn2Hi) - k * kLn2Lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float y = p * std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
    x[i] = std::bit_cast<float>((std::bit_cast<uint32_t>(y) & ~tiny & ~nan) | (u & nan));
  }
}

// max of x[0..n), n >= 1, over 8 lanes (max is exact, so only speed depends on the lanes).
inline float max_of(const float* x, int64_t n) {
  float lane[8];
  for (int k = 0; k < 8; ++k) lane[k] = x[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = lane[k] > x[i + k] ? lane[k] : x[i + k];
  float m = lane[0];
  for (int k = 1; k < 8; ++k) m = m > lane[k] ? m : lane[k];
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  return m;
}

// sum of x[0..n) in double over 8 lanes combined pairwise, then the tail: a fixed order.
inline double sum_of(const float* x, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(x[i + k]);
  double s = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

}  // namespace ferry::cpu
