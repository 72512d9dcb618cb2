// Token embedding: the gather (forward) and the deterministic scatter-add (backward: CUB radix
// sort of the ids, then one block per distinct id), Llama-3 vocabulary, 16k tokens.
#include <cstdio>
#include <random>

#include "bench_common.h"
#include "ops/ops.h"

namespace ferry::bench {

void bench_embedding(Bench& b) {
  CudaOps ops(b.stream());
  auto cpu = make_cpu_ops();
  {
    const int64_t T = 257, V = 32003, H = 96;
    Vec table = random_vec(V * H, 1), dout = random_vec(T * H, 2);
    std::vector<int32_t> ids(T);
    std::mt19937 gen(3);
    for (auto& id : ids) id = static_cast<int32_t>(gen() % 3 == 0 ? gen() % 4 : gen() % V);  // repeats
    Vec out_ref(T * H), dt_ref(V * H, 0.0f);
    cpu->embedding_forward(ids.data(), Tensor::f32(table.data(), {V, H}),
                           Tensor::f32(out_ref.data(), {T, H}));
    cpu->embedding_backward(ids.data(), Tensor::f32(dout.data(), {T, H}), Tensor::f32(dt_ref.data(), {V, H}));
    DeviceTensor gt(DType::BF16, {V, H}), gout(DType::BF16, {T, H}), gd(DType::BF16, {T, H}),
        gdt(DType::F32, {V, H});
    DeviceBuf gids(T * 4);
    upload(gt, table), upload(gd, dout), upload(gdt, Vec(V * H, 0.0f)), upload_ints(gids, ids);
    ops.embedding_forward(gids.as<int32_t>(), gt.t, gout.t);
    ops.embedding_backward(gids.as<int32_t>(), gd.t, gdt.t);
    const double eo = rel_rms(download(gout), out_ref), ed = rel_rms(download(gdt), dt_ref);
    char detail[128];
    std::snprintf(detail, sizeof detail, "out rel rms %.2e (limit 0), dtable %.2e (limit 1e-6)", eo, ed);
    b.check("embedding T=257 V=32003 H=96", eo == 0 && ed <= 1e-6, detail);
  }
  const int64_t T = 16384, V = 128256, H = 4096;
  DeviceTensor table(DType::BF16, {V, H}), out(DType::BF16, {T, H}), dout(DType::BF16, {T, H});
  DeviceTensor dtable(DType::F32, {V, H});
  fill_random(table, 1), fill_random(dout, 2), fill_random(dtable, 3);
  std::vector<int32_t> spread(T), skewed(T);
  std::mt19937 gen(4);
  for (int64_t t = 0; t < T; ++t) {
    spread[t] = static_cast<int32_t>(gen() % V);
    skewed[t] = static_cast<int32_t>(gen() % 2 ? gen() % 16 : gen() % V);  // half the tokens share 16 ids
  }
  DeviceBuf ids_spread(T * 4), ids_skewed(T * 4);
  upload_ints(ids_spread, spread), upload_ints(ids_skewed, skewed);
  const double n = static_cast<double>(T) * H;
  b.add({"embedding fwd", "T=16384 V=128256 H=4096",
         b.time_us([&] { ops.embedding_forward(ids_spread.as<int32_t>(), table.t, out.t); }), 4 * n, 0,
         "row gather"});
  // Backward bytes: dout read (2) + the touched dtable rows read and written (4 + 4).
  b.add({"embedding bwd", "T=16384 H=4096 ids spread",
         b.time_us([&] { ops.embedding_backward(ids_spread.as<int32_t>(), dout.t, dtable.t); }), 10 * n, 0,
         "F32 dtable"});
  b.add({"embedding bwd", "T=16384 H=4096 ids skewed",
         b.time_us([&] { ops.embedding_backward(ids_skewed.as<int32_t>(), dout.t, dtable.t); }), 10 * n, 0,
         "half the tokens on 16 ids: one block walks each run"});
}

}  // namespace ferry::bench
