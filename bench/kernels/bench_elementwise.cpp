// The memory-bound kernels of a layer: rmsnorm (hidden D = 4096 and q/k-norm D = 128), rope and
// swiglu, at 16k tokens of an 8B Llama. Bytes are the minimum each op must move (every input read
// once, every output written once); a kernel that reads a row twice from DRAM shows below 100%.
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "ops/ops.h"

namespace ferry::bench {

namespace {

constexpr double kU = 1.0 / 256;

std::string detail_of(const char* what, double err, double limit) {
  char s[96];
  std::snprintf(s, sizeof s, "%s rel rms %.2e (limit %.1e)", what, err, limit);
  return s;
}

}  // namespace

void bench_rmsnorm(Bench& b) {
  CudaOps ops(b.stream());
  auto cpu = make_cpu_ops();
  const std::pair<int64_t, int64_t> checks[] = {{257, 4096}, {1031, 128}, {33, 12}};
  for (auto [R, D] : checks) {
    Vec x = random_vec(R * D, 1, -2, 2), w = random_vec(D, 2, 0.5f, 1.5f), g = random_vec(R * D, 3);
    Vec out_ref(R * D), rstd_ref(R), dx_ref(R * D), dw_ref(D, 0.0f);
    cpu->rmsnorm_forward(Tensor::f32(x.data(), {R, D}), Tensor::f32(w.data(), {D}), 1e-6f,
                         Tensor::f32(out_ref.data(), {R, D}), Tensor::f32(rstd_ref.data(), {R}));
    cpu->rmsnorm_backward(Tensor::f32(x.data(), {R, D}), Tensor::f32(w.data(), {D}),
                          Tensor::f32(rstd_ref.data(), {R}), Tensor::f32(g.data(), {R, D}), Tensor(),
                          Tensor::f32(dx_ref.data(), {R, D}), Tensor::f32(dw_ref.data(), {D}));
    DeviceTensor gx(DType::BF16, {R, D}), gw(DType::BF16, {D}), gg(DType::BF16, {R, D}),
        gout(DType::BF16, {R, D});
    DeviceTensor grstd(DType::F32, {R}), gdx(DType::BF16, {R, D}), gdw(DType::F32, {D});
    upload(gx, x), upload(gw, w), upload(gg, g), upload(gdw, Vec(D, 0.0f));
    ops.rmsnorm_forward(gx.t, gw.t, 1e-6f, gout.t, grstd.t);
    ops.rmsnorm_backward(gx.t, gw.t, grstd.t, gg.t, Tensor(), gdx.t, gdw.t);
    const double eo = rel_rms(download(gout), out_ref), er = rel_rms(download(grstd), rstd_ref);
    const double edx = rel_rms(download(gdx), dx_ref), edw = rel_rms(download(gdw), dw_ref);
    char what[64];
    std::snprintf(what, sizeof what, "rmsnorm R=%lld D=%lld", (long long)R, (long long)D);
    b.check(what, eo <= kU && er <= 1e-5 && edx <= kU && edw <= 1e-4,
            detail_of("out", eo, kU) + ", " + detail_of("rstd", er, 1e-5) + ", " + detail_of("dx", edx, kU) +
                ", " + detail_of("dweight", edw, 1e-4));
  }
  const std::pair<int64_t, int64_t> shapes[] = {
      {16384, 4096}, {65536, 2048}, {65536, 3072}, {16384 * 32, 128}, {16384 * 8, 128}};
  for (auto [R, D] : shapes) {
    DeviceTensor x(DType::BF16, {R, D}), w(DType::BF16, {D}), g(DType::BF16, {R, D}),
        out(DType::BF16, {R, D});
    DeviceTensor rstd(DType::F32, {R}), dx(DType::BF16, {R, D}), dw(DType::F32, {D});
    fill_random(x, 1, -2, 2), fill_random(w, 2, 0.5f, 1.5f), fill_random(g, 3), fill_random(dw, 4);
    fill_random(dx, 5);
    char shape[64];
    std::snprintf(shape, sizeof shape, "R=%lld D=%lld", (long long)R, (long long)D);
    const double n = static_cast<double>(R) * D;
    b.add({"rmsnorm fwd", shape, b.time_us([&] { ops.rmsnorm_forward(x.t, w.t, 1e-6f, out.t, rstd.t); }),
           4 * n + 4.0 * R, 0, "x in, out out (bf16)"});
    ops.rmsnorm_forward(x.t, w.t, 1e-6f, out.t, rstd.t);
    b.add({"rmsnorm bwd dx", shape,
           b.time_us([&] { ops.rmsnorm_backward(x.t, w.t, rstd.t, g.t, Tensor(), dx.t, Tensor()); }),
           6 * n + 4.0 * R, 0, "x, dout in, dx out"});
    // dweight alone is the column-sum pass that a backward of both ran after dx where D does not
    // take the one pass: dx + dw alone is that two-pass backward's time.
    b.add({"rmsnorm bwd dw", shape,
           b.time_us([&] { ops.rmsnorm_backward(x.t, w.t, rstd.t, g.t, Tensor(), Tensor(), dw.t); }),
           4 * n + 4.0 * R, 0, "x, dout in"});
    b.add({"rmsnorm bwd dx+dw", shape,
           b.time_us([&] { ops.rmsnorm_backward(x.t, w.t, rstd.t, g.t, Tensor(), dx.t, dw.t); }),
           6 * n + 4.0 * R, 0, "one pass where D is whole warps of 8 (<= 4096)"});
    // A layer's call: the residual's gradient in dx, added to in place.
    b.add({"rmsnorm bwd dx+=,dw", shape,
           b.time_us([&] { ops.rmsnorm_backward(x.t, w.t, rstd.t, g.t, dx.t, dx.t, dw.t); }), 8 * n + 4.0 * R,
           0, "x, dout, dx in, dx out"});
  }
}

void bench_rope(Bench& b) {
  CudaOps ops(b.stream());
  auto cpu = make_cpu_ops();
  const std::tuple<int64_t, int64_t, int64_t> checks[] = {{257, 4, 128}, {127, 3, 12}};
  for (auto [T, heads, D] : checks) {
    Vec x = random_vec(T * heads * D, 1, -2, 2), inv(D / 2);
    for (int64_t i = 0; i < D / 2; ++i) inv[i] = 1.0f / std::pow(500000.0f, 2.0f * i / D);
    std::vector<int32_t> pos(T);
    for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>((t * 37) % 8192);
    Vec ref = x;
    cpu->rope(Tensor::f32(ref.data(), {T, heads, D}), pos.data(), inv.data(), false);
    DeviceTensor gx(DType::BF16, {T, heads, D}), gf(DType::F32, {D / 2});
    DeviceBuf gpos(T * 4);
    upload(gx, x), upload(gf, inv), upload_ints(gpos, pos);
    ops.rope(gx.t, gpos.as<int32_t>(), gf.buf.as<float>(), false);
    const double e = rel_rms(download(gx), ref);
    char what[64];
    std::snprintf(what, sizeof what, "rope T=%lld heads=%lld D=%lld", (long long)T, (long long)heads,
                  (long long)D);
    b.check(what, e <= kU, detail_of("x", e, kU));
  }
  const int64_t T = 16384, D = 128;
  DeviceTensor inv(DType::F32, {D / 2});
  fill_random(inv, 5, 0.0f, 1.0f);
  DeviceBuf pos(T * 4);
  std::vector<int32_t> p(T);
  for (int64_t t = 0; t < T; ++t) p[t] = static_cast<int32_t>(t % 4096);
  upload_ints(pos, p);
  for (int64_t heads : {32, 8}) {
    DeviceTensor x(DType::BF16, {T, heads, D});
    fill_random(x, 1);
    char shape[64];
    std::snprintf(shape, sizeof shape, "T=%lld heads=%lld D=%lld", (long long)T, (long long)heads,
                  (long long)D);
    b.add({"rope", shape, b.time_us([&] { ops.rope(x.t, pos.as<int32_t>(), inv.buf.as<float>(), false); }),
           4.0 * T * heads * D, 0, "in place"});
  }
}

void bench_swiglu(Bench& b) {
  CudaOps ops(b.stream());
  auto cpu = make_cpu_ops();
  {
    const int64_t T = 257, Fd = 1000, n = T * Fd;
    Vec g = random_vec(n, 1, -6, 6), u = random_vec(n, 2, -2, 2), d = random_vec(n, 3);
    Vec y(n), dg(n), du(n);
    cpu->swiglu_forward(Tensor::f32(g.data(), {n}), Tensor::f32(u.data(), {n}), Tensor::f32(y.data(), {n}));
    cpu->swiglu_backward(Tensor::f32(g.data(), {n}), Tensor::f32(u.data(), {n}), Tensor::f32(d.data(), {n}),
                         Tensor::f32(dg.data(), {n}), Tensor::f32(du.data(), {n}), Tensor());
    DeviceTensor gg(DType::BF16, {n}), gu(DType::BF16, {n}), gd(DType::BF16, {n}), gy(DType::BF16, {n});
    DeviceTensor gdg(DType::BF16, {n}), gdu(DType::BF16, {n});
    upload(gg, g), upload(gu, u), upload(gd, d);
    ops.swiglu_forward(gg.t, gu.t, gy.t);
    ops.swiglu_backward(gg.t, gu.t, gd.t, gdg.t, gdu.t, Tensor());
    const double ey = rel_rms(download(gy), y), edg = rel_rms(download(gdg), dg),
                 edu = rel_rms(download(gdu), du);
    b.check("swiglu T=257 F=1000", ey <= kU && edg <= kU && edu <= kU,
            detail_of("out", ey, kU) + ", " + detail_of("dgate", edg, kU) + ", " + detail_of("dup", edu, kU));
  }
  const int64_t T = 16384, Fd = 14336;
  DeviceTensor g(DType::BF16, {T, Fd}), u(DType::BF16, {T, Fd}), d(DType::BF16, {T, Fd}),
      y(DType::BF16, {T, Fd});
  DeviceTensor dg(DType::BF16, {T, Fd}), du(DType::BF16, {T, Fd});
  fill_random(g, 1, -6, 6), fill_random(u, 2), fill_random(d, 3);
  const double n = static_cast<double>(T) * Fd;
  b.add(
      {"swiglu fwd", "T=16384 F=14336", b.time_us([&] { ops.swiglu_forward(g.t, u.t, y.t); }), 6 * n, 0, ""});
  b.add({"swiglu bwd", "T=16384 F=14336",
         b.time_us([&] { ops.swiglu_backward(g.t, u.t, d.t, dg.t, du.t, Tensor()); }), 10 * n, 0, ""});
  // A layer's backward: the activation again for down_proj's dw, in the same pass.
  b.add({"swiglu bwd+act", "T=16384 F=14336",
         b.time_us([&] { ops.swiglu_backward(g.t, u.t, d.t, dg.t, du.t, y.t); }), 12 * n, 0,
         "separately: fwd + bwd"});
}

}  // namespace ferry::bench
