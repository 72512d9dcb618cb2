// Rotary position embedding with Hugging Face's rotate_half convention: the first and second
// halves of each head's vector form the pairs (x[i], x[i + D/2]), i < D/2, rotated by
// position * inv_freq[i]. The angle is the fp32 product and cos/sin are taken in fp32, as
// transformers does, so the reference matches it to an ulp. rope() rotates in place; rope_qkv()
// rotates between the packed rows of one q/k/v product and the three tensors attention reads, by
// the same per-head rotation, so that both give the same bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

namespace {

// One token's cos and sin (sin negated for the inverse rotation: the transpose of the rotation by
// angle) of the D/2 frequencies.
struct TokenAngles {
  std::vector<float> cs, sn;
  explicit TokenAngles(int64_t half) : cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half)) {}
  void set(int32_t position, const float* inv_freq, bool inverse) {
    const float pos = static_cast<float>(position), sign = inverse ? -1.0f : 1.0f;
    for (size_t i = 0; i < cs.size(); ++i) {
      const float angle = pos * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = sign * std::sin(angle);
    }
  }
  // `heads` head vectors of D values from src to dst (which may be src), rotated.
  void rotate(const float* src, float* dst, int64_t heads) const {
    const int64_t half = static_cast<int64_t>(cs.size()), D = 2 * half;
    for (int64_t h = 0; h < heads; ++h, src += D, dst += D) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = src[i], b = src[i + half];
        dst[i] = a * cs[i] - b * sn[i];
        dst[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
};

}  // namespace

// x (T, heads, D); positions (T); inv_freq (D/2).
void CpuOps::rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) {
  const char* op = "rope";
  cpu::expect_f32(op, "x", x);
  cpu::expect(x.ndim == 3, op, fmt::format("x is {}, expected (T, heads, D)", x.shape_string()));
  const int64_t T = x.shape[0], heads = x.shape[1], D = x.shape[2];
  cpu::expect(D % 2 == 0, op, fmt::format("x is {}; head_dim must be even", x.shape_string()));
  if (T == 0 || heads == 0 || D == 0) return;
  cpu::expect(positions != nullptr && inv_freq != nullptr, op, "positions or inv_freq is null");
  float* xs = x.f32();
  ThreadPool::global().parallel_for(
      T,
      [&](size_t t0, size_t t1) {
        TokenAngles angles(D / 2);
        for (size_t t = t0; t < t1; ++t) {
          angles.set(positions[t], inv_freq, inverse);
          float* row = xs + static_cast<int64_t>(t) * heads * D;
          angles.rotate(row, row, heads);
        }
      },
      8);
}

// qkv (T, Hq + 2 Hkv, D); q (T, Hq, D); k, v (T, Hkv, D).
void CpuOps::rope_qkv(Tensor qkv, Tensor q, Tensor k, Tensor v, const int32_t* positions,
                      const float* inv_freq, bool inverse) {
  const char* op = "rope_qkv";
  cpu::expect_f32(op, "q", q);
  cpu::expect(q.ndim == 3 && q.shape[2] % 2 == 0, op,
              fmt::format("q is {}, expected (T, Hq, D) with an even D", q.shape_string()));
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.ndim == 3 ? k.shape[1] : 0;
  cpu::expect_shape(op, "k", k, {T, Hkv, D});
  cpu::expect_shape(op, "v", v, {T, Hkv, D});
  cpu::expect_shape(op, "qkv", qkv, {T, Hq + 2 * Hkv, D});
  if (T == 0 || D == 0) return;
  cpu::expect(positions != nullptr && inv_freq != nullptr, op, "positions or inv_freq is null");
  const int64_t W = (Hq + 2 * Hkv) * D, QD = Hq * D, KD = Hkv * D;
  ThreadPool::global().parallel_for(
      T,
      [&](size_t t0, size_t t1) {
        TokenAngles angles(D / 2);
        for (size_t t = t0; t < t1; ++t) {
          angles.set(positions[t], inv_freq, inverse);
          const int64_t i = static_cast<int64_t>(t);
          float* packed = qkv.f32() + i * W;
          float *qs = q.f32() + i * QD, *ks = k.f32() + i * KD, *vs = v.f32() + i * KD;
          if (inverse) {
            angles.rotate(qs, packed, Hq);
            angles.rotate(ks, packed + QD, Hkv);
            std::copy(vs, vs + KD, packed + QD + KD);
          } else {
            angles.rotate(packed, qs, Hq);
            angles.rotate(packed + QD, ks, Hkv);
            std::copy(packed + QD + KD, packed + W, vs);
          }
        }
      },
      8);
}

}  // namespace ferry
