// Normal random numbers for weight initialisation, fast and the same on every machine.
//
// The i-th value of a stream depends only on its key and i (a counter-based generator: SplitMix64's
// output function over h(key) + (i + 1) * its increment, h its output function too), so a stream
// may be filled in pieces, in any order, on any number of threads. Pairs of values come from the Box-Muller
// transform, computed with IEEE additions, multiplications, divisions and square roots alone (a logarithm and
// a sine and cosine of this file's own, no FMA contraction): no libm and no instruction-set choice can change
// a bit, so a preset's weights are the same on every machine and build.
#pragma once

#include <cstdint>

namespace ferry {

// dst[j] = scale * z(key, first + j) for j < count, z(key, i) the stream's i-th standard normal
// value (float(z) rounded once, then multiplied by scale). Values 2p and 2p + 1 of a stream are one
// Box-Muller pair; a fill may start or end inside one.
void fill_normal(float* dst, int64_t count, uint64_t key, float scale, int64_t first = 0);

// The stream's i-th standard normal value in double precision, before the float rounding: what
// fill_normal computes, one value at a time (tests compare it with libm's transform).
double normal_value(uint64_t key, int64_t i);

// ln(u) for u = n * 2^-52 in (0, 1] (1 <= n <= 2^52) and (cos, sin) of 2 pi t for t = b * 2^-53 in
// [0, 1), as fill_normal computes them: within a few units in the last place of libm's
// (tests/core_normal_fill_test.cpp).
double normal_fill_log(double u);
void normal_fill_sincos_turns(double t, double& c, double& s);

}  // namespace ferry
