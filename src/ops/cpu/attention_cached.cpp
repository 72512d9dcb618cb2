// Attention of a sequence's newest queries over its key/value cache (generation), computed exactly:
// each (query, head) row takes its scores, their max, the exponentials and the weighted sum of
// values in plain order, in fp32 (as attention_forward's reference). O(T S D) per head; generation
// calls it with T = 1 after the prompt, so the cost is a pass over the cache.
//
// Every row is computed start to finish by one thread: the results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

// q (T,Hq,D); k, v (S,Hkv,D) with S >= T; out (T,Hq,D).
void CpuOps::attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) {
  const char* op = "attention_cached";
  cpu::expect_f32(op, "q", q);
  cpu::expect(q.ndim == 3, op, fmt::format("q is {}, expected (T, Hq, D)", q.shape_string()));
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  cpu::expect_f32(op, "k", k);
  cpu::expect(k.ndim == 3 && k.shape[2] == D, op,
              fmt::format("k is {}, expected (S, Hkv, {})", k.shape_string(), D));
  const int64_t S = k.shape[0], Hkv = k.shape[1];
  cpu::expect_shape(op, "v", v, {S, Hkv, D});
  cpu::expect_shape(op, "out", out, {T, Hq, D});
  cpu::expect(S >= T, op, fmt::format("the cache holds {} tokens, fewer than the {} queries", S, T));
  cpu::expect(Hkv > 0 && Hq % Hkv == 0, op, fmt::format("{} query heads for {} kv heads", Hq, Hkv));
  if (T == 0 || Hq == 0 || D == 0) return;
  const int64_t group = Hq / Hkv, past = S - T;
  const float* qs = q.f32();
  const float* ks = k.f32();
  const float* vs = v.f32();
  float* os = out.f32();
  ThreadPool::global().parallel_for(
      static_cast<size_t>(T * Hq),
      [&](size_t r0, size_t r1) {
        std::vector<float> p(static_cast<size_t>(S));
        for (size_t r = r0; r < r1; ++r) {
          const int64_t t = static_cast<int64_t>(r) / Hq, h = static_cast<int64_t>(r) % Hq, kh = h / group;
          const int64_t keys = past + t + 1;
          const float* qr = qs + (t * Hq + h) * D;
          float max_score = -INFINITY;
          for (int64_t j = 0; j < keys; ++j) {
            const float* kr = ks + (j * Hkv + kh) * D;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; ++d) dot += qr[d] * kr[d];
            p[j] = dot * scale;
            max_score = std::max(max_score, p[j]);
          }
          float sum = 0.0f;
          for (int64_t j = 0; j < keys; ++j) {
            p[j] = std::exp(p[j] - max_score);
            sum += p[j];
          }
          float* o = os + (t * Hq + h) * D;
          std::fill(o, o + D, 0.0f);
          for (int64_t j = 0; j < keys; ++j) {
            const float* vr = vs + (j * Hkv + kh) * D;
            const float w = p[j] / sum;
            for (int64_t d = 0; d < D; ++d) o[d] += w * vr[d];
          }
        }
      },
      1);
}

}  // namespace ferry
