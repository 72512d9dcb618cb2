// Rotary position embedding, in place, with Hugging Face's rotate_half convention: the first and
// second halves of each head's vector form the pairs (x[i], x[i + D/2]), i < D/2, rotated by
// position * inv_freq[i]. The angle is the fp32 product and cos/sin are taken in fp32, as
// transformers does, so the reference matches it to an ulp.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

// x (T, heads, D); positions (T); inv_freq (D/2).
void CpuOps::rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) {
  const char* op = "rope";
  cpu::expect_f32(op, "x", x);
  cpu::expect(x.ndim == 3, op, fmt::format("x is {}, expected (T, heads, D)", x.shape_string()));
  const int64_t T = x.shape[0], heads = x.shape[1], D = x.shape[2];
  cpu::expect(D % 2 == 0, op, fmt::format("x is {}; head_dim must be even", x.shape_string()));
  if (T == 0 || heads == 0 || D == 0) return;
  cpu::expect(positions != nullptr && inv_freq != nullptr, op, "positions or inv_freq is null");
  const int64_t half = D / 2;
  float* xs = x.f32();
  // The rotation by -angle is the transpose (and inverse) of the rotation by angle.
  const float sign = inverse ? -1.0f : 1.0f;
  ThreadPool::global().parallel_for(
      T,
      [&](size_t t0, size_t t1) {
        std::vector<float> cs(half), sn(half);
        for (size_t t = t0; t < t1; ++t) {
          const float pos = static_cast<float>(positions[t]);
          for (int64_t i = 0; i < half; ++i) {
            const float angle = pos * inv_freq[i];
            cs[i] = std::cos(angle);
            sn[i] = sign * std::sin(angle);
          }
          for (int64_t h = 0; h < heads; ++h) {
            float* x1 = xs + (t * heads + h) * D;
            float* x2 = x1 + half;
            for (int64_t i = 0; i < half; ++i) {
              const float a = x1[i], b = x2[i];
              x1[i] = a * cs[i] - b * sn[i];
              x2[i] = b * cs[i] + a * sn[i];
            }
          }
        }
      },
      8);
}

}  // namespace ferry
