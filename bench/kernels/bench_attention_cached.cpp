// Attention over a KV cache (generation's decode step, ops/cuda/attention_cached.cu): one query per
// head of Llama-3.1-8B's shape (32 query heads, 8 kv heads, head_dim 128) over caches of 1k to 32k
// tokens, and a prefill chunk of 256 queries. Memory-bound at one query: the bytes are the cache's
// K and V, read once per query head (the GQA group shares them through L2 at best).
#include <cstdio>

#include "bench_common.h"
#include "ops/ops.h"

namespace ferry::bench {

void bench_attention_cached(Bench& b) {
  CudaOps ops(b.stream());
  auto cpu = make_cpu_ops();
  {
    const int64_t T = 3, S = 301, Hq = 8, Hkv = 2, D = 128;
    const float scale = 0.0883883f;
    Vec q = random_vec(T * Hq * D, 1, -2, 2), k = random_vec(S * Hkv * D, 2, -2, 2),
        v = random_vec(S * Hkv * D, 3);
    Vec ref(q.size());
    cpu->attention_cached(Tensor::f32(q.data(), {T, Hq, D}), Tensor::f32(k.data(), {S, Hkv, D}),
                          Tensor::f32(v.data(), {S, Hkv, D}), scale, Tensor::f32(ref.data(), {T, Hq, D}));
    DeviceTensor gq(DType::BF16, {T, Hq, D}), gk(DType::BF16, {S, Hkv, D}), gv(DType::BF16, {S, Hkv, D});
    DeviceTensor gout(DType::BF16, {T, Hq, D});
    upload(gq, q), upload(gk, k), upload(gv, v);
    ops.attention_cached(gq.t, gk.t, gv.t, scale, gout.t);
    const double e = rel_rms(download(gout), ref);
    char detail[96];
    std::snprintf(detail, sizeof detail, "out rel rms %.2e (limit 2^-8)", e);
    b.check("attention_cached T=3 S=301 Hq=8 Hkv=2 D=128", e <= 1.0 / 256, detail);
  }
  const int64_t Hq = 32, Hkv = 8, D = 128, context = 32768;
  DeviceTensor k(DType::BF16, {context, Hkv, D}), v(DType::BF16, {context, Hkv, D});
  DeviceTensor q(DType::BF16, {256, Hq, D}), out(DType::BF16, {256, Hq, D});
  fill_random(k, 1), fill_random(v, 2), fill_random(q, 3);
  for (int64_t S : {1024, 4096, 32768}) {
    Tensor ks(k.t.data, DType::BF16, {S, Hkv, D}), vs(v.t.data, DType::BF16, {S, Hkv, D});
    Tensor q1(q.t.data, DType::BF16, {1, Hq, D}), o1(out.t.data, DType::BF16, {1, Hq, D});
    const double bytes = 2.0 * S * Hkv * D * 2;
    char shape[64];
    std::snprintf(shape, sizeof shape, "T=1 S=%lld Hq=32 Hkv=8 D=128", static_cast<long long>(S));
    b.add({"attention_cached", shape, b.time_us([&] { ops.attention_cached(q1, ks, vs, 0.0883883f, o1); }),
           bytes, 0, "decode step: K and V once"});
  }
  const int64_t S = 4096;
  Tensor ks(k.t.data, DType::BF16, {S, Hkv, D}), vs(v.t.data, DType::BF16, {S, Hkv, D});
  b.add({"attention_cached", "T=256 S=4096 Hq=32 Hkv=8 D=128",
         b.time_us([&] { ops.attention_cached(q.t, ks, vs, 0.0883883f, out.t); }), 0,
         4.0 * 256 * Hq * D * (S - 128), "prefill chunk: QK and PV FLOPs"});
}

}  // namespace ferry::bench
