// Flash attention harness (DESIGN.md §6.8): check, then time.
//
// 1. Checks the tensor-core kernels against the CPU reference (make_cpu_ops(), fp32, fed the
//    same bf16-rounded inputs) at a small packed shape for head_dim 64 and 128, and against the
//    simple GPU kernels at a long two-document shape. Tolerances as in
//    tests/ops_flash_attention_gpu_test.cpp. Any failure: exit status 1, before timing.
// 2. Times forward, backward, and forward+backward at T = 16384 tokens made of sequences of 2048,
//    4096, 8192 (batch-equivalent 8, 4, 2 documents packed), Hq 32, Hkv 8, D 128, causal, and
//    reports TFLOP/s: forward counts 4 S^2 D Hq / 2 per sequence of S tokens (two products, half
//    the matrix), backward 2.5 times that, against the H200's ~776 TFLOP/s dense bf16 peak as
//    measured for a large GEMM (DESIGN.md §5). Where the kernels are the wgmma ones (a compute
//    capability 9.0 device, unless FERRY_FLASH_WGMMA=0), the mma.sync ones are timed beside them.
//    Then the same at D 64.
//
// 3. Times cuDNN's fused attention (ops/cuda/cudnn_attention.h) at the same shapes when cuDNN is
//    installed: the path CudaOps takes for rows that are causal sequences; and ferry's kernels'
//    rate as a share of cuDNN's.
//
//    Then packed documents of random lengths (mean 128, 512, 2048): the own kernels against
//    cuDNN's ragged batch (AttentionMask::segment_bounds), the path of packed rows.
//
// 4. With --long: one sequence of 16K to 256K tokens a row instead (long-context training).
//
// Usage: flash_attention_bench [--no-check] [--long] [--iters N]
// bench/sdpa_baseline.py times PyTorch's scaled_dot_product_attention at the same shapes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/flash_attention_internal.h"
#include "ops/cuda_ops_sizes.h"
#include "ops/ops.h"

namespace {

using namespace ferry;

constexpr double kPeakTflops = 776.0;

#define BENCH_CUDA(call)                                                                              \
  do {                                                                                                \
    const cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "%s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                   cudaGetErrorString(e_));                                                           \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)

struct DeviceMem {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceMem(size_t n) : bytes(n) { BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(n, 16))); }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = f32_to_bf16(dist(rng));
  return out;
}

std::vector<float> to_f32(const std::vector<uint16_t>& b) {
  std::vector<float> out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = bf16_to_f32(b[i]);
  return out;
}

// doc_start for documents beginning at `starts` (0 implied).
std::vector<int32_t> doc_start(int64_t T, std::vector<int64_t> starts) {
  starts.insert(starts.begin(), 0);
  std::vector<int32_t> ds(static_cast<size_t>(T));
  size_t d = 0;
  for (int64_t t = 0; t < T; ++t) {
    while (d + 1 < starts.size() && starts[d + 1] <= t) ++d;
    ds[static_cast<size_t>(t)] = static_cast<int32_t>(starts[d]);
  }
  return ds;
}

// Inputs and outputs of one shape on the device.
struct Problem {
  int64_t T;
  int Hq, Hkv, D;
  float scale;
  std::vector<int32_t> ds;
  std::vector<uint16_t> q, k, v, dout;
  std::unique_ptr<DeviceMem> dq_in, dk_in, dv_in, ddout, dds, out, lse, dq, dk, dv, ws;

  Problem(int64_t T_, int Hq_, int Hkv_, int D_, std::vector<int32_t> ds_)
      : T(T_),
        Hq(Hq_),
        Hkv(Hkv_),
        D(D_),
        scale(1.0f / std::sqrt(static_cast<float>(D_))),
        ds(std::move(ds_)) {
    const size_t nq = static_cast<size_t>(T * Hq * D), nk = static_cast<size_t>(T * Hkv * D);
    q = random_bf16(nq, 11), k = random_bf16(nk, 12), v = random_bf16(nk, 13), dout = random_bf16(nq, 14);
    auto make = [](size_t n) { return std::make_unique<DeviceMem>(n); };
    dq_in = make(nq * 2), dk_in = make(nk * 2), dv_in = make(nk * 2), ddout = make(nq * 2),
    dds = make(ds.size() * 4);
    out = make(nq * 2), lse = make(static_cast<size_t>(Hq * T) * 4), dq = make(nq * 2), dk = make(nk * 2),
    dv = make(nk * 2), ws = make(flash_attention_backward_workspace(T, Hq, Hkv, D));
    BENCH_CUDA(cudaMemcpy(dq_in->p, q.data(), nq * 2, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(dk_in->p, k.data(), nk * 2, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(dv_in->p, v.data(), nk * 2, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(ddout->p, dout.data(), nq * 2, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(dds->p, ds.data(), ds.size() * 4, cudaMemcpyHostToDevice));
  }
  FlashAttentionParams params() const {
    return {dq_in->p,
            dk_in->p,
            dv_in->p,
            out->p,
            static_cast<float*>(lse->p),
            static_cast<const int32_t*>(dds->p),
            T,
            Hq,
            Hkv,
            D,
            scale,
            static_cast<int>(Hq)};
  }
  FlashAttentionBackwardParams backward_params() const {
    return {params(), ddout->p, dq->p, dk->p, dv->p, ws->p, ws->bytes};
  }
  std::vector<float> get_bf16(const DeviceMem& m) const {
    std::vector<uint16_t> b(m.bytes / 2);
    BENCH_CUDA(cudaMemcpy(b.data(), m.p, m.bytes, cudaMemcpyDeviceToHost));
    return to_f32(b);
  }
  std::vector<float> get_f32(const DeviceMem& m) const {
    std::vector<float> x(m.bytes / 4);
    BENCH_CUDA(cudaMemcpy(x.data(), m.p, m.bytes, cudaMemcpyDeviceToHost));
    return x;
  }
};

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

Outputs download(const Problem& p) {
  return {p.get_bf16(*p.out), p.get_f32(*p.lse), p.get_bf16(*p.dq), p.get_bf16(*p.dk), p.get_bf16(*p.dv)};
}

// |err| <= max_rel * max|ref| (+ atol) elementwise, and rms(err) <= rms_rel * rms(ref) when rms_rel > 0.
bool compare(const char* what, const std::vector<float>& got, const std::vector<float>& ref, double max_rel,
             double rms_rel, double atol = 0.0) {
  double ref_max = 0, ref2 = 0, err2 = 0, worst = 0;
  size_t worst_i = 0, bad = 0;
  for (float r : ref) ref_max = std::max(ref_max, std::fabs(static_cast<double>(r))), ref2 += double(r) * r;
  const double tol = max_rel * ref_max + atol;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(double(got[i]) - ref[i]) : INFINITY;
    if (std::isfinite(e)) err2 += e * e;
    if (!(e <= tol)) ++bad;
    if (!(e <= worst)) worst = e, worst_i = i;
  }
  const double rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const bool ok = bad == 0 && (rms_rel <= 0 || rms <= rms_rel);
  std::printf("    %-4s %-3s max|err| %.3g (tol %.3g)  rms rel %.3g%s  worst [%zu] %g vs %g\n",
              ok ? "ok" : "FAIL", what, worst, tol, rms, rms_rel > 0 ? "" : " (not checked)", worst_i,
              got[worst_i], ref[worst_i]);
  return ok;
}

// Forward tolerance: 2 * 2^-8 of max|v| (inputs in [-1, 1], so max|v| <= 1); lse 1e-3 absolute;
// gradients 2^-5 of max|ref| elementwise and 2^-6 relative RMS.
bool compare_all(const Outputs& got, const Outputs& ref) {
  bool ok = compare("out", got.out, ref.out, 0.0, 0.0, 2.0 / 256);
  ok &= compare("lse", got.lse, ref.lse, 0.0, 0.0, 1e-3);
  ok &= compare("dq", got.dq, ref.dq, 1.0 / 32, 1.0 / 64);
  ok &= compare("dk", got.dk, ref.dk, 1.0 / 32, 1.0 / 64);
  ok &= compare("dv", got.dv, ref.dv, 1.0 / 32, 1.0 / 64);
  return ok;
}

bool check_against_cpu(int D) {
  const int64_t T = 700;
  Problem p(T, 8, 2, D, doc_start(T, {150, 151, 333, 600}));
  std::printf("  vs CPU reference: T %lld, Hq 8, Hkv 2, D %d, documents at 0 150 151 333 600\n",
              static_cast<long long>(T), D);
  flash_attention_forward(p.params(), nullptr);
  flash_attention_backward(p.backward_params(), nullptr);
  BENCH_CUDA(cudaDeviceSynchronize());
  const size_t nq = p.q.size(), nk = p.k.size();
  Outputs ref{std::vector<float>(nq), std::vector<float>(static_cast<size_t>(p.Hq * T)),
              std::vector<float>(nq), std::vector<float>(nk), std::vector<float>(nk)};
  std::vector<float> q = to_f32(p.q), k = to_f32(p.k), v = to_f32(p.v), g = to_f32(p.dout);
  auto cpu = make_cpu_ops();
  const Tensor tq = Tensor::f32(q.data(), {T, p.Hq, D}), tk = Tensor::f32(k.data(), {T, p.Hkv, D}),
               tv = Tensor::f32(v.data(), {T, p.Hkv, D}), tout = Tensor::f32(ref.out.data(), {T, p.Hq, D}),
               tlse = Tensor::f32(ref.lse.data(), {p.Hq, T});
  cpu->attention_forward(tq, tk, tv, p.ds.data(), p.scale, tout, tlse);
  cpu->attention_backward(tq, tk, tv, p.ds.data(), p.scale, tout, tlse, Tensor::f32(g.data(), {T, p.Hq, D}),
                          Tensor::f32(ref.dq.data(), {T, p.Hq, D}), Tensor::f32(ref.dk.data(), {T, p.Hkv, D}),
                          Tensor::f32(ref.dv.data(), {T, p.Hkv, D}));
  return compare_all(download(p), ref);
}

bool check_against_simple(int D) {
  const int64_t T = 8192;
  Problem p(T, 8, 2, D, doc_start(T, {5000}));
  std::printf("  vs simple GPU kernels: T %lld, Hq 8, Hkv 2, D %d, documents at 0 5000\n",
              static_cast<long long>(T), D);
  flash_attention_forward_simple(p.params(), nullptr);
  flash_attention_backward_simple(p.backward_params(), nullptr);
  BENCH_CUDA(cudaDeviceSynchronize());
  const Outputs ref = download(p);
  flash_attention_forward(p.params(), nullptr);
  flash_attention_backward(p.backward_params(), nullptr);
  BENCH_CUDA(cudaDeviceSynchronize());
  return compare_all(download(p), ref);
}

// Mean milliseconds of `body` over `iters` runs after `warmup` runs.
template <class Body>
double time_ms(int warmup, int iters, const Body& body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  BENCH_CUDA(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) body();
  BENCH_CUDA(cudaEventRecord(stop));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  return ms / iters;
}

void print_header() {
  std::printf("  %6s %5s | %9s %8s %6s | %9s %8s %6s | %9s %8s %6s\n", "seq", "batch", "fwd ms", "TFLOP/s",
              "%peak", "bwd ms", "TFLOP/s", "%peak", "f+b ms", "TFLOP/s", "%peak");
}

// Times ferry's kernels (and cuDNN's, when given) on T tokens packed as sequences of S, Hq 32,
// Hkv 8, D 128. `packed_shapes` (the short sequences): three warm-up runs, forward+backward timed
// as one, and the backward's main kernel alone in its two configurations; otherwise (one sequence
// of up to 256K tokens, seconds a call) one warm-up run and forward+backward as the sum.
void time_packed(int64_t T, int64_t S, int iters, CudnnAttention* cudnn, bool packed_shapes, int D = 128) {
  const int warmup = packed_shapes ? 3 : 1;
  const auto time_both = [&](const auto& fwd_body, const auto& bwd_body, double fwd_ms, double bwd_ms) {
    if (!packed_shapes) return fwd_ms + bwd_ms;
    return time_ms(warmup, iters, [&] {
      fwd_body();
      bwd_body();
    });
  };
  const int Hq = 32, Hkv = 8;
  std::vector<int64_t> starts;
  for (int64_t s = S; s < T; s += S) starts.push_back(s);
  Problem p(T, Hq, Hkv, D, doc_start(T, starts));
  const double fwd_flops = static_cast<double>(T / S) * 4.0 * S * S * D * Hq / 2.0;
  const double bwd_flops = 2.5 * fwd_flops;
  const auto fp = p.params();
  const auto bp = p.backward_params();
  const auto own_fwd = [&] { flash_attention_forward(fp, nullptr); };
  const auto own_bwd = [&] { flash_attention_backward(bp, nullptr); };
  const double fwd = time_ms(warmup, iters, own_fwd);
  const double bwd = time_ms(warmup, iters, own_bwd);
  const double both = time_both(own_fwd, own_bwd, fwd, bwd);
  auto tf = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
  std::printf("  %6lld %5lld | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%%\n",
              static_cast<long long>(S), static_cast<long long>(T / S), fwd, tf(fwd_flops, fwd),
              100 * tf(fwd_flops, fwd) / kPeakTflops, bwd, tf(bwd_flops, bwd),
              100 * tf(bwd_flops, bwd) / kPeakTflops, both, tf(fwd_flops + bwd_flops, both),
              100 * tf(fwd_flops + bwd_flops, both) / kPeakTflops);
  std::fflush(stdout);
  if (cudnn != nullptr) {
    DeviceMem ws(attention_workspace_bytes(T, Hq, D));
    auto cbp = bp;
    cbp.workspace = ws.p;
    cbp.workspace_bytes = ws.bytes;
    if (!cudnn->forward(fp, S, ws.p, ws.bytes) || !cudnn->backward(cbp, S)) {
      std::printf("  %6s %5s   cuDNN refused: %s\n", "", "", cudnn->last_refusal().c_str());
    } else {
      const auto cudnn_fwd = [&] { cudnn->forward(fp, S, ws.p, ws.bytes); };
      const auto cudnn_bwd = [&] { cudnn->backward(cbp, S); };
      const double cf = time_ms(warmup, iters, cudnn_fwd);
      const double cb = time_ms(warmup, iters, cudnn_bwd);
      const double cboth = time_both(cudnn_fwd, cudnn_bwd, cf, cb);
      std::printf("  %6s %5s | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%%  cuDNN\n", "",
                  "", cf, tf(fwd_flops, cf), 100 * tf(fwd_flops, cf) / kPeakTflops, cb, tf(bwd_flops, cb),
                  100 * tf(bwd_flops, cb) / kPeakTflops, cboth, tf(fwd_flops + bwd_flops, cboth),
                  100 * tf(fwd_flops + bwd_flops, cboth) / kPeakTflops);
      // The rate of ferry's kernels as a share of cuDNN's: what a machine without cuDNN keeps.
      std::printf(
          "  %6s %5s   ferry's kernels / cuDNN: forward %.2fx, backward %.2fx, forward+backward %.2fx\n", "",
          "", cf / fwd, cb / bwd, cboth / both);
    }
    std::fflush(stdout);
  }
  if (!packed_shapes) return;
  if (flash_attention_forward_uses_wgmma(D)) {
    // The kernels above are the wgmma ones; the mma.sync ones (sm_80's) beside them.
    const auto sm80_fwd = [&] { flash_attention_forward_sm80(fp, nullptr); };
    const auto sm80_bwd = [&] { flash_attention_backward_sm80(bp, nullptr); };
    const double f = time_ms(warmup, iters, sm80_fwd), b = time_ms(warmup, iters, sm80_bwd);
    const double fb = time_both(sm80_fwd, sm80_bwd, f, b);
    std::printf(
        "  %6s %5s | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%%  mma.sync kernels\n", "",
        "", f, tf(fwd_flops, f), 100 * tf(fwd_flops, f) / kPeakTflops, b, tf(bwd_flops, b),
        100 * tf(bwd_flops, b) / kPeakTflops, fb, tf(fwd_flops + bwd_flops, fb),
        100 * tf(fwd_flops + bwd_flops, fb) / kPeakTflops);
  }
  if (D != 128) return;
  // The backward's main kernel alone (no delta, zeroing or dq conversion), in its two D = 128
  // configurations; the workspace already holds delta from the runs above, and dq_accum only
  // collects garbage here.
  const float* delta = static_cast<const float*>(p.ws->p);
  float* dq_accum = reinterpret_cast<float*>(static_cast<char*>(p.ws->p) + flash::delta_bytes(T, Hq));
  if (flash_attention_forward_uses_wgmma(D)) {
    const double ms = time_ms(3, iters, [&] { flash::backward_wgmma(bp, delta, dq_accum, nullptr); });
    std::printf("  %6s %5s   backward kernel only, wgmma:                 %9.3f ms %8.1f TFLOP/s %5.1f%%\n",
                "", "", ms, tf(bwd_flops, ms), 100 * tf(bwd_flops, ms) / kPeakTflops);
  }
  for (int keys : {128, 64}) {
    try {
      const double ms =
          time_ms(3, iters, [&] { flash::backward_tensor_core(bp, delta, dq_accum, nullptr, keys); });
      std::printf("  %6s %5s   backward kernel only, %3d keys per block: %9.3f ms %8.1f TFLOP/s %5.1f%%\n",
                  "", "", keys, ms, tf(bwd_flops, ms), 100 * tf(bwd_flops, ms) / kPeakTflops);
    } catch (const std::exception& e) {
      std::printf("  %6s %5s   backward kernel only, %3d keys per block: %s\n", "", "", keys, e.what());
    }
  }
}

// Times ferry's kernels and cuDNN's ragged batch (AttentionMask::segment_bounds) on T tokens of
// packed documents of random lengths 1..2 * mean_len (a fixed seed), Hq 32, Hkv 8, D 128: what a
// run with packing: true on short documents runs. With `row` > 0 the documents are cut at every
// row's end, as a chunk of rows holds them. FLOPs count each document's causal pairs. Then cuDNN
// again with as many empty entries added as the batch had (twice its entries): what the batch's
// rounding up to a power of two costs.
void time_documents(int64_t T, int64_t mean_len, int64_t row, int iters, CudnnAttention* cudnn) {
  const int Hq = 32, Hkv = 8, D = 128;
  std::mt19937_64 rng(static_cast<uint64_t>(mean_len));
  std::uniform_int_distribution<int64_t> length(1, 2 * mean_len);
  std::vector<int64_t> starts;
  std::vector<int32_t> bounds = {0};
  double pairs = 0;
  int64_t longest = 0;
  for (int64_t t = 0; t < T;) {
    const int64_t row_end = row > 0 ? (t / row + 1) * row : T;
    const int64_t len = std::min(length(rng), row_end - t);
    pairs += 0.5 * static_cast<double>(len) * static_cast<double>(len + 1);
    longest = std::max(longest, len);
    t += len;
    bounds.push_back(static_cast<int32_t>(t));
    if (t < T) starts.push_back(t);
  }
  Problem p(T, Hq, Hkv, D, doc_start(T, starts));
  const double fwd_flops = 4.0 * D * Hq * pairs, bwd_flops = 2.5 * fwd_flops;
  auto tf = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
  const auto fp = p.params();
  const auto bp = p.backward_params();
  auto report = [&](const char* who, double fwd, double bwd, double both) {
    std::printf("  %6lld %5zu | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%% | %9.3f %8.1f %5.1f%%  %s\n",
                static_cast<long long>(mean_len), bounds.size() - 1, fwd, tf(fwd_flops, fwd),
                100 * tf(fwd_flops, fwd) / kPeakTflops, bwd, tf(bwd_flops, bwd),
                100 * tf(bwd_flops, bwd) / kPeakTflops, both, tf(fwd_flops + bwd_flops, both),
                100 * tf(fwd_flops + bwd_flops, both) / kPeakTflops, who);
    std::fflush(stdout);
  };
  const auto own_fwd = [&] { flash_attention_forward(fp, nullptr); };
  const auto own_bwd = [&] { flash_attention_backward(bp, nullptr); };
  report("own", time_ms(3, iters, own_fwd), time_ms(3, iters, own_bwd), time_ms(3, iters, [&] {
           own_fwd();
           own_bwd();
         }));
  if (cudnn == nullptr) return;
  DeviceMem d_bounds(bounds.size() * sizeof(int32_t));
  BENCH_CUDA(cudaMemcpy(d_bounds.p, bounds.data(), bounds.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  const AttentionSegments segments{static_cast<const int32_t*>(d_bounds.p),
                                   static_cast<int64_t>(bounds.size()) - 1, longest};
  DeviceMem ws(attention_workspace_bytes(T, Hq, D));
  auto cbp = bp;
  cbp.workspace = ws.p;
  cbp.workspace_bytes = ws.bytes;
  if (!cudnn->forward(fp, segments, ws.p, ws.bytes)) {
    std::printf("  %6s %5s   cuDNN refused the segments: %s\n", "", "", cudnn->last_refusal().c_str());
    return;
  }
  const auto cudnn_fwd = [&] { cudnn->forward(fp, segments, ws.p, ws.bytes); };
  const double cf = time_ms(3, iters, cudnn_fwd);
  if (!cudnn->backward(cbp, segments)) {
    // What CudaOps runs then: cuDNN's forward, the own backward.
    std::printf("  %6s %5s | %9.3f %8.1f %5.1f%% | backward refused (%s): the own one runs\n", "", "", cf,
                tf(fwd_flops, cf), 100 * tf(fwd_flops, cf) / kPeakTflops, cudnn->last_refusal().c_str());
    return;
  }
  const auto cudnn_bwd = [&] { cudnn->backward(cbp, segments); };
  report("cuDNN, ragged", cf, time_ms(3, iters, cudnn_bwd), time_ms(3, iters, [&] {
           cudnn_fwd();
           cudnn_bwd();
         }));
  int64_t entries = 1;  // the batch cuDNN ran: the segments, rounded up to a power of two
  while (entries < segments.count) entries *= 2;
  std::vector<int32_t> doubled = bounds;
  doubled.insert(doubled.end(), static_cast<size_t>(entries), static_cast<int32_t>(T));
  DeviceMem d_doubled(doubled.size() * sizeof(int32_t));
  BENCH_CUDA(
      cudaMemcpy(d_doubled.p, doubled.data(), doubled.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  const AttentionSegments padded{static_cast<const int32_t*>(d_doubled.p),
                                 static_cast<int64_t>(doubled.size()) - 1, longest};
  if (!cudnn->forward(fp, padded, ws.p, ws.bytes) || !cudnn->backward(cbp, padded)) {
    std::printf("  %6s %5s   cuDNN refused %lld entries: %s\n", "", "", static_cast<long long>(2 * entries),
                cudnn->last_refusal().c_str());
    return;
  }
  const auto padded_fwd = [&] { cudnn->forward(fp, padded, ws.p, ws.bytes); };
  const auto padded_bwd = [&] { cudnn->backward(cbp, padded); };
  const std::string who = "cuDNN, ragged, " + std::to_string(2 * entries) + " entries (half empty)";
  report(who.c_str(), time_ms(3, iters, padded_fwd), time_ms(3, iters, padded_bwd), time_ms(3, iters, [&] {
           padded_fwd();
           padded_bwd();
         }));
}

int run(int argc, char** argv) {
  bool check = true, long_sequences = false;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-check") == 0)
      check = false;
    else if (std::strcmp(argv[i], "--long") == 0)
      long_sequences = true;
    else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--no-check] [--long] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("flash attention bench on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);

  if (check) {
    std::printf("checks\n");
    bool ok = true;
    for (int D : {64, 128}) ok &= check_against_cpu(D);
    ok &= check_against_simple(128);
    if (!ok) {
      std::printf("CHECK FAILED: not timing\n");
      return 1;
    }
  }

  std::unique_ptr<CudnnAttention> cudnn = CudnnAttention::make(nullptr);
  if (cudnn == nullptr)
    std::printf("cuDNN: not timed (%s)\n", CudnnAttention::unavailable_reason().c_str());
  else
    std::printf("cuDNN %zu: timed after ferry's kernels\n", CudnnAttention::library_version());
  if (long_sequences) {
    // One sequence a row, as long-context training runs: where attention outgrows the layer's
    // GEMMs (issue: 256K tokens on a 24 GiB GPU), and the profiler's warm-up runs it ~30 times.
    std::printf("timing: one sequence of S tokens, Hq 32, Hkv 8, D 128, causal, %d iterations\n", iters);
    print_header();
    for (int64_t S : {16384, 32768, 65536, 131072, 262144}) time_packed(S, S, iters, cudnn.get(), false);
  } else {
    std::printf("timing: T 16384 tokens, Hq 32, Hkv 8, D 128, causal within each sequence, %d iterations\n",
                iters);
    print_header();
    for (int64_t S : {2048, 4096, 8192}) time_packed(16384, S, iters, cudnn.get(), true);
    std::printf("timing: the same with D 64 (Llama-3.2-1B's heads)\n");
    print_header();
    for (int64_t S : {2048, 4096, 8192}) time_packed(16384, S, iters, cudnn.get(), true, 64);
    std::printf(
        "timing: T 16384 tokens of packed documents of 1..2x the mean length (first column), Hq 32, "
        "Hkv 8, D 128, causal within each document, %d iterations\n",
        iters);
    std::printf("  %6s %5s\n", "mean", "docs");
    for (int64_t mean : {128, 512, 2048}) time_documents(16384, mean, 0, iters, cudnn.get());
    std::printf(
        "timing: a chunk of 4 rows of 2048 tokens (the 8B at 24 GiB) holding documents of 1..2048 tokens, "
        "cut at the rows' ends\n");
    std::printf("  %6s %5s\n", "mean", "docs");
    time_documents(8192, 1024, 2048, iters, cudnn.get());
    std::printf("timing: the same chunk as 4 rows of one sequence each (more causal pairs)\n");
    print_header();
    time_packed(8192, 2048, iters, cudnn.get(), false);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_attention_bench: %s\n", e.what());
    return 1;
  }
}
