#include "core/normal_fill.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/check.h"

// Built without FMA contraction (CMakeLists.txt): a * b + c rounds twice on every machine. The
// loops are elementwise and branch-free (choices are integer masks on the doubles' bits), so GCC
// vectorises them; the AVX2 clone (no FMA in GCC's avx2 target) returns the baseline's bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FERRY_NO_CLONES)
#define FERRY_NORMAL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FERRY_NORMAL_CLONES
#endif

namespace ferry {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment

[[gnu::always_inline]] inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

[[gnu::always_inline]] inline uint64_t bits_of(double x) {
  return std::bit_cast<uint64_t>(x);
}
[[gnu::always_inline]] inline double double_of(uint64_t b) {
  return std::bit_cast<double>(b);
}

// n as a double, exactly, for -2^51 <= n <= 2^51 (the bits of 1.5 * 2^52 + n, less 1.5 * 2^52):
// integer addition and one subtraction, which vectorise where a 64-bit conversion does not.
[[gnu::always_inline]] inline double signed_to_double(int64_t n) {
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  return double_of(bits_of(kMagic) + static_cast<uint64_t>(n)) - kMagic;
}
// n as a double, exactly, for 0 <= n <= 2^52 (2^52 + n: at n = 2^52 the carry into the exponent
// makes it 2^53, still exact).
[[gnu::always_inline]] inline double unsigned_to_double(uint64_t n) {
  constexpr double kMagic = 4503599627370496.0;  // 2^52
  return double_of(bits_of(kMagic) + n) - kMagic;
}

// ln(u) for u = n * 2^-52, 1 <= n <= 2^52. u = m * 2^e with m in [sqrt(1/2), sqrt(2)); ln m =
// 2 atanh(f), f = (m - 1) / (m + 1), |f| <= 0.172, from its series to f^23 (the next term is below
// 2^-60 of the sum); e ln2 with ln2 split so that e * kLn2Hi is exact.
[[gnu::always_inline]] inline double log_of_uniform(uint64_t n) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 low bits zero
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr uint64_t kSqrt2Bits = 0x3FF6A09E667F3BCDull;
  const double u = unsigned_to_double(n) * 0x1.0p-52;  // exact: a power-of-two scale
  const uint64_t b = bits_of(u);
  uint64_t m_bits = (b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;  // m in [1, 2)
  const uint64_t big = 0ull - static_cast<uint64_t>(m_bits > kSqrt2Bits);
  m_bits -= big & (uint64_t{1} << 52);  // halved: m in [sqrt(1/2), sqrt(2))
  const int64_t e = static_cast<int64_t>(b >> 52) - 1023 + static_cast<int64_t>(big & 1);
  const double m = double_of(m_bits);
  const double f = (m - 1.0) / (m + 1.0);
  const double s = f * f;
  double p = 1.0 / 23;
  p = p * s + 1.0 / 21;
  p = p * s + 1.0 / 19;
  p = p * s + 1.0 / 17;
  p = p * s + 1.0 / 15;
  p = p * s + 1.0 / 13;
  p = p * s + 1.0 / 11;
  p = p * s + 1.0 / 9;
  p = p * s + 1.0 / 7;
  p = p * s + 1.0 / 5;
  p = p * s + 1.0 / 3;
  const double ln_m = 2.0 * f + 2.0 * f * s * p;
  const double ed = signed_to_double(e);
  return ed * kLn2Hi + (ed * kLn2Lo + ln_m);
}

// (cos, sin) of 2 pi t for t = b * 2^-53, b < 2^53: the quarter turn q = round(4 t) taken out in
// integers (exact), the rest x = 2 pi (t - q / 4) in [-pi/4, pi/4] through Taylor series to x^16
// and x^17 (the next terms are below 3e-18), then rotated by q quarter turns.
[[gnu::always_inline]] inline void sincos_of_turns(uint64_t b, double& c, double& s) {
  constexpr double kTurnScale = 6.283185307179586476925286766559 * 0x1.0p-53;  // 2 pi / 2^53
  const uint64_t q = (b + (uint64_t{1} << 50)) >> 51;                          // 0..4; 4 is a whole turn
  const int64_t rest = static_cast<int64_t>(b) - static_cast<int64_t>(q << 51);
  const double x = signed_to_double(rest) * kTurnScale;
  const double x2 = x * x;
  double sp = 1.0 / 355687428096000.0;  // 1/17!
  sp = sp * x2 - 1.0 / 1307674368000.0;
  sp = sp * x2 + 1.0 / 6227020800.0;
  sp = sp * x2 - 1.0 / 39916800.0;
  sp = sp * x2 + 1.0 / 362880.0;
  sp = sp * x2 - 1.0 / 5040.0;
  sp = sp * x2 + 1.0 / 120.0;
  sp = sp * x2 - 1.0 / 6.0;
  const double sin_x = x + x * x2 * sp;
  double cp = 1.0 / 20922789888000.0;  // 1/16!
  cp = cp * x2 - 1.0 / 87178291200.0;
  cp = cp * x2 + 1.0 / 479001600.0;
  cp = cp * x2 - 1.0 / 3628800.0;
  cp = cp * x2 + 1.0 / 40320.0;
  cp = cp * x2 - 1.0 / 720.0;
  cp = cp * x2 + 1.0 / 24.0;
  const double cos_x = (1.0 - 0.5 * x2) + x2 * x2 * cp;
  // cos(x + q pi/2), sin(x + q pi/2): odd q swaps them; q = 1, 2 negate the cosine, q = 2, 3 the sine.
  const uint64_t quarter = q & 3;
  const uint64_t swap = 0ull - (quarter & 1);
  const uint64_t cb = bits_of(cos_x), sb = bits_of(sin_x);
  const uint64_t c0 = (swap & sb) | (~swap & cb), s0 = (swap & cb) | (~swap & sb);
  c = double_of(c0 ^ ((((quarter + 1) >> 1) & 1) << 63));
  s = double_of(s0 ^ ((quarter >> 1) << 63));
}

// Where stream `key`'s counter starts. Hashed: keys a multiple of the increment apart (seed *
// increment + index, as the presets' are) would otherwise give copies of one stream shifted by
// that many values.
[[gnu::always_inline]] inline uint64_t stream_start(uint64_t key) {
  return mix64(key);
}

// The pair p of the stream that starts at `start`: draws 2p (the radius's uniform, 52 bits) and
// 2p + 1 (the angle's, 53).
[[gnu::always_inline]] inline void normal_pair(uint64_t start, uint64_t p, double& z0, double& z1) {
  const uint64_t d0 = mix64(start + (2 * p + 1) * kGolden), d1 = mix64(start + (2 * p + 2) * kGolden);
  const double r = std::sqrt(-2.0 * log_of_uniform((d0 >> 12) + 1));
  double c, s;
  sincos_of_turns(d1 >> 11, c, s);
  z0 = r * c;
  z1 = r * s;
}

constexpr int64_t kBlockPairs = 256;

// Pairs [p0, p0 + n) into z0 and z1 (n <= kBlockPairs).
FERRY_NORMAL_CLONES void normal_block(uint64_t start, uint64_t p0, int64_t n, double* z0, double* z1) {
  for (int64_t j = 0; j < n; ++j) normal_pair(start, p0 + static_cast<uint64_t>(j), z0[j], z1[j]);
}

}  // namespace

void fill_normal(float* dst, int64_t count, uint64_t key, float scale, int64_t first) {
  FERRY_ASSERT(first >= 0 && count >= 0, "fill_normal: a stream's values are numbered from 0");
  if (count > 0 && first % 2 == 1) {  // the second value of a pair: on its own, then whole pairs
    *dst++ = scale * static_cast<float>(normal_value(key, first++));
    --count;
  }
  const uint64_t start = stream_start(key);
  double z0[kBlockPairs], z1[kBlockPairs];
  for (int64_t at = 0; at < count; at += 2 * kBlockPairs) {
    const int64_t values = std::min(2 * kBlockPairs, count - at), pairs = (values + 1) / 2;
    normal_block(start, static_cast<uint64_t>((first + at) / 2), pairs, z0, z1);
    for (int64_t j = 0; j < values / 2; ++j) {
      dst[at + 2 * j] = scale * static_cast<float>(z0[j]);
      dst[at + 2 * j + 1] = scale * static_cast<float>(z1[j]);
    }
    if (values % 2 == 1) dst[at + values - 1] = scale * static_cast<float>(z0[pairs - 1]);
  }
}

double normal_value(uint64_t key, int64_t i) {
  double z0, z1;
  normal_pair(stream_start(key), static_cast<uint64_t>(i / 2), z0, z1);
  return i % 2 == 0 ? z0 : z1;
}

double normal_fill_log(double u) {
  return log_of_uniform(static_cast<uint64_t>(u * 0x1.0p52));
}

void normal_fill_sincos_turns(double t, double& c, double& s) {
  sincos_of_turns(static_cast<uint64_t>(t * 0x1.0p53), c, s);
}

}  // namespace ferry
