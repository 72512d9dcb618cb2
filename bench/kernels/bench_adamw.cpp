// The GPU AdamW (optim/gpu_adamw.h): one fused pass over 256M parameters (an 8B model's largest
// units are ~0.2-0.5G), fp32 or bf16 gradients, with the bf16 weight copy; and the device-side
// gradient sum of squares. Memory-bound: bytes per parameter are counted from the buffers touched.
#include <cstdio>
#include <cstring>

#include "bench_common.h"
#include "optim/adamw.h"
#include "optim/gpu_adamw.h"

namespace ferry::bench {

void bench_adamw(Bench& b) {
  GpuAdamW adamw(b.stream());
  AdamWHyper hyper;
  hyper.lr = 1e-3, hyper.weight_decay = 0.1;
  {
    const size_t n = 100003;
    Vec master = random_vec(n, 1, -1, 1, false), m = random_vec(n, 2, -1e-3f, 1e-3f, false);
    Vec v = random_vec(n, 3, 0, 1e-5f, false), grad = random_vec(n, 4, -1e-2f, 1e-2f, false);
    DeviceTensor gm(DType::F32, {int64_t(n)}), gmm(DType::F32, {int64_t(n)}), gv(DType::F32, {int64_t(n)});
    DeviceTensor gg(DType::F32, {int64_t(n)}), gout(DType::BF16, {int64_t(n)});
    upload(gm, master), upload(gmm, m), upload(gv, v), upload(gg, grad);
    const std::vector<AdamWSegment> segments = {{0, 60000, true}, {60000, n - 60000, false}};
    AdamWUnitBuffers unit{gm.buf.as<float>(), gmm.buf.as<float>(), gv.buf.as<float>(),
                          gg.buf.get(),       DType::F32,          gout.buf.as<uint16_t>()};
    for (int64_t step = 1; step <= 2; ++step) {
      adamw.step(unit, segments, hyper, step, nullptr);
      for (const AdamWSegment& s : segments)
        adamw_step(master.data() + s.offset, m.data() + s.offset, v.data() + s.offset, grad.data() + s.offset,
                   s.count, hyper, step, s.decay);
    }
    const Vec got = download(gm);
    size_t diff = 0;
    for (size_t i = 0; i < n; ++i) diff += std::memcmp(&got[i], &master[i], 4) != 0;
    char detail[96];
    std::snprintf(detail, sizeof detail, "%zu of %zu masters differ from adamw_step (limit 0: bit-exact)",
                  diff, n);
    b.check("adamw n=100003, 2 steps", diff == 0, detail);
  }
  const size_t n = size_t{256} << 20;
  const int64_t N = static_cast<int64_t>(n);
  DeviceTensor master(DType::F32, {N}), m(DType::F32, {N}), v(DType::F32, {N}), g32(DType::F32, {N});
  DeviceTensor g16(DType::BF16, {N}), out(DType::BF16, {N});
  DeviceBuf sum(8), scale(4);
  fill_random(master, 1), fill_random(m, 2, -1e-3f, 1e-3f), fill_random(v, 3, 0, 1e-5f);
  fill_random(g32, 4, -1e-2f, 1e-2f), fill_random(g16, 5, -1e-2f, 1e-2f);
  FERRY_CUDA_CHECK(cudaMemset(sum.get(), 0, 8));
  const float one = 1.0f;
  FERRY_CUDA_CHECK(cudaMemcpy(scale.get(), &one, 4, cudaMemcpyHostToDevice));
  const std::vector<AdamWSegment> segments = {{0, n, true}};
  int64_t step = 1;
  AdamWUnitBuffers unit{master.buf.as<float>(), m.buf.as<float>(), v.buf.as<float>(),
                        g32.buf.get(),          DType::F32,        out.buf.as<uint16_t>()};
  b.add({"adamw", "256M params, F32 grads",
         b.time_us([&] { adamw.step(unit, segments, hyper, step++, scale.as<float>()); }), 30.0 * n, 0,
         "read p m v g (16 B), write p m v + bf16 (14 B)"});
  unit.grad = g16.buf.get();
  unit.grad_dtype = DType::BF16;
  b.add({"adamw", "256M params, BF16 grads",
         b.time_us([&] { adamw.step(unit, segments, hyper, step++, scale.as<float>()); }), 28.0 * n, 0,
         "read 14 B, write 14 B"});
  b.add({"grad sumsq", "256M F32",
         b.time_us([&] { adamw.add_grad_sumsq(g32.buf.get(), DType::F32, n, sum.as<double>()); }), 4.0 * n, 0,
         "clip.cpp's chunk order: one thread per 64Ki chunk"});
  b.add({"grad sumsq", "256M BF16",
         b.time_us([&] { adamw.add_grad_sumsq(g16.buf.get(), DType::BF16, n, sum.as<double>()); }), 2.0 * n,
         0, ""});
}

}  // namespace ferry::bench
