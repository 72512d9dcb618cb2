// The fused linear + cross-entropy (CudaOps::linear_cross_entropy) against the unfused logits path
// (the same op with a chunk budget large enough for all T x V logits at once, which is what a
// plain logits = x w^T; loss = CE(logits); backward would hold): time, FLOP rate (three GEMMs,
// 6 T H V) and the working memory each needs, at Llama-3 8B's head (H 4096, V 128256), with the
// weight gradient in fp32 (a head updated on the GPU) and, at the default chunks, in bf16.
#include <cmath>
#include <cstdio>

#include "bench_common.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda_ops_sizes.h"
#include "ops/ops.h"

namespace ferry::bench {

namespace {

void check(Bench& b, int64_t T, int64_t H, int64_t V, size_t chunk_bytes) {
  auto cpu = make_cpu_ops();
  // Logits ~ N(0, 1): x ~ U(-1, 1), w ~ U(-s, s) with s = 3 / sqrt(H).
  const float s = 3.0f / std::sqrt(static_cast<float>(H));
  Vec x = random_vec(T * H, 1), w = random_vec(V * H, 2, -s, s);
  std::vector<int32_t> targets(T);
  for (int64_t t = 0; t < T; ++t)
    targets[t] = t % 7 == 3 ? kIgnoreIndex : static_cast<int32_t>((t * 7919) % V);
  const float gs = 1.0f / static_cast<float>(T);
  Vec dx_ref(T * H), dw_ref(V * H, 0.0f);
  const double loss_ref = dynamic_cast<CpuOps&>(*cpu).linear_cross_entropy_sum(
      Tensor::f32(x.data(), {T, H}), Tensor::f32(w.data(), {V, H}), targets.data(), gs,
      Tensor::f32(dx_ref.data(), {T, H}), Tensor::f32(dw_ref.data(), {V, H}), Tensor());
  CudaOpsOptions options;
  options.flce_chunk_bytes = chunk_bytes;
  CudaOps ops(b.stream(), options);
  DeviceTensor gx(DType::BF16, {T, H}), gw(DType::BF16, {V, H}), gdx(DType::BF16, {T, H}),
      gdw(DType::F32, {V, H});
  DeviceTensor gloss(DType::F32, {1});
  DeviceBuf gt(T * 4);
  upload(gx, x), upload(gw, w), upload(gdw, Vec(V * H, 0.0f)), upload(gloss, Vec{0.0f}),
      upload_ints(gt, targets);
  ops.linear_cross_entropy(gx.t, gw.t, gt.as<int32_t>(), gs, gdx.t, gdw.t, gloss.t, Tensor(), 1);
  const double loss = download(gloss)[0];
  const double el = std::abs(loss - loss_ref) / std::abs(loss_ref);
  const double edx = rel_rms(download(gdx), dx_ref), edw = rel_rms(download(gdw), dw_ref);
  char what[96], detail[160];
  std::snprintf(what, sizeof what, "flce T=%lld H=%lld V=%lld chunk=%lld", (long long)T, (long long)H,
                (long long)V, (long long)ops.flce_chunk_tokens(V));
  // bf16 logits and dlogits: a few u relative on the gradients, well under 1e-3 on the loss.
  std::snprintf(detail, sizeof detail,
                "loss %.6f vs %.6f (rel %.1e, limit 1e-3), dx %.2e dw %.2e (limit 2e-2)", loss, loss_ref, el,
                edx, edw);
  b.check(what, el <= 1e-3 && edx <= 2e-2 && edw <= 2e-2, detail);
}

}  // namespace

void bench_flce(Bench& b) {
  check(b, 257, 96, 32003, size_t{256} << 20);
  check(b, 257, 96, 32003, 50 * 32008 * 2);
  check(b, 127, 4096, 1000, size_t{256} << 20);

  const int64_t T = 8192, H = 4096, V = 128256;
  DeviceTensor x(DType::BF16, {T, H}), w(DType::BF16, {V, H}), dx(DType::BF16, {T, H}),
      dw(DType::F32, {V, H});
  DeviceTensor loss(DType::F32, {1});
  DeviceBuf targets(T * 4);
  fill_random(x, 1), fill_random(w, 2, -0.02f, 0.02f), fill_random(dw, 3);
  std::vector<int32_t> tg(T);
  for (int64_t t = 0; t < T; ++t) tg[t] = static_cast<int32_t>((t * 7919) % V);
  upload_ints(targets, tg);
  const double flops = 6.0 * T * H * V;
  struct Variant {
    const char* name;
    size_t chunk_bytes;
  };
  for (const Variant& v : {Variant{"fused (512 MiB chunks)", size_t{512} << 20},
                           Variant{"fused (256 MiB chunks)", size_t{256} << 20},
                           Variant{"fused (64 MiB chunks)", size_t{64} << 20},
                           Variant{"unfused (all logits)", static_cast<size_t>(T) * ((V + 7) / 8 * 8) * 2}}) {
    CudaOpsOptions options;
    options.flce_chunk_bytes = v.chunk_bytes;
    CudaOps ops(b.stream(), options);
    size_t free0 = 0, total = 0;
    FERRY_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    const double us = b.time_us([&] {
      ops.linear_cross_entropy(x.t, w.t, targets.as<int32_t>(), 1.0f / T, dx.t, dw.t, loss.t, Tensor(), 1);
    });
    char note[160];
    std::snprintf(note, sizeof note, "%s: %lld-token chunks, working memory %.0f MiB", v.name,
                  (long long)ops.flce_chunk_tokens(V), ops.workspace_bytes() / 1048576.0);
    b.add({"flce fwd+bwd", "T=8192 H=4096 V=128256", us, 0, flops, note});
    const double us_fwd = b.time_us([&] {
      ops.linear_cross_entropy(x.t, w.t, targets.as<int32_t>(), 1.0f, Tensor(), Tensor(), loss.t, Tensor(),
                               1);
    });
    b.add({"flce loss only", "T=8192 H=4096 V=128256", us_fwd, 0, 2.0 * T * H * V, v.name});
  }
  // A head updated on the host keeps its weight gradient in bf16 (the plan's gradient dtype): the
  // dw product then writes half the bytes per chunk.
  DeviceTensor dw16(DType::BF16, {V, H});
  fill_random(dw16, 4, -1e-3f, 1e-3f);
  CudaOps ops(b.stream(), CudaOpsOptions{});
  const double us = b.time_us([&] {
    ops.linear_cross_entropy(x.t, w.t, targets.as<int32_t>(), 1.0f / T, dx.t, dw16.t, loss.t, Tensor(), 1);
  });
  char note[160];
  std::snprintf(note, sizeof note, "fused, default chunks (%lld tokens), bf16 weight gradient",
                (long long)ops.flce_chunk_tokens(V));
  b.add({"flce fwd+bwd", "T=8192 H=4096 V=128256", us, 0, flops, note});

  // The whole-GPU Llama-3.2-1B's head: one micro-chunk of 65,536 tokens, H 2048, its weight
  // gradient in fp32 (updated on the GPU), at the default chunks, with the weight gradient's
  // product over kHeadWeightGradChunks of them, and at chunks that many times as large.
  const int64_t T1 = 65536, H1 = 2048;
  DeviceTensor x1(DType::BF16, {T1, H1}), w1(DType::BF16, {V, H1}), dx1(DType::BF16, {T1, H1}),
      dw1(DType::F32, {V, H1});
  DeviceBuf targets1(T1 * 4);
  fill_random(x1, 5), fill_random(w1, 6, -0.02f, 0.02f), fill_random(dw1, 7);
  std::vector<int32_t> tg1(T1);
  for (int64_t t = 0; t < T1; ++t) tg1[t] = static_cast<int32_t>((t * 7919) % V);
  upload_ints(targets1, tg1);
  struct HeadVariant {
    size_t chunk_bytes;
    int64_t weight_grad_chunks;
  };
  for (const HeadVariant& hv :
       {HeadVariant{kCudaFlceChunkBytes, 1}, HeadVariant{kCudaFlceChunkBytes, kHeadWeightGradChunks},
        HeadVariant{kHeadWeightGradChunks * kCudaFlceChunkBytes, 1}}) {
    CudaOpsOptions options;
    options.flce_chunk_bytes = hv.chunk_bytes;
    CudaOps head(b.stream(), options);
    const double us1 = b.time_us([&] {
      head.linear_cross_entropy(x1.t, w1.t, targets1.as<int32_t>(), 1.0f / T1, dx1.t, dw1.t, loss.t, Tensor(),
                                hv.weight_grad_chunks);
    });
    std::snprintf(note, sizeof note,
                  "fused, %lld-token chunks, fp32 weight gradient over %lld chunks at once",
                  (long long)head.flce_chunk_tokens(V), (long long)hv.weight_grad_chunks);
    b.add({"flce fwd+bwd", "T=65536 H=2048 V=128256", us1, 0, 6.0 * T1 * H1 * V, note});
  }
}

}  // namespace ferry::bench
