// CPU AdamW harness (DESIGN.md §6.8): checks the SIMD kernel against the scalar reference, then
// times one step over --params parameters (default 1e8) on all cores, for
//   simd bf16: bf16 gradients in, bf16 copy out  -- the engine's case, 26 bytes/param
//   simd fp32: fp32 gradients in, bf16 copy out  -- 28 + 2 = 30 bytes/param
//   simd bf16, no copy: bf16 gradients in, no bf16 copy (weight_upload: convert-on-upload) -- 26 - 2 = 24
//   reference: adamw_step, fp32 gradients, no bf16 copy -- 28 bytes/param
//   lean FORMAT: lean_adamw_step (optim/lean_adamw.h), bf16 gradients in, bf16 copy out over them
//                -- adamw_traffic_bytes_per_param(FORMAT) bytes/param (14.25 / 12.25 / 10.25)
// Two bandwidth yardsticks run on the same pool: a STREAM triad (a = b + s*c, 12 bytes/element) and
// a "same traffic" pass that reads and writes exactly the bytes of the simd bf16 case with trivial
// arithmetic, i.e. the DRAM roofline for this access pattern. The roofline fraction printed is
//   fraction = (bytes/param x params/s) / (bytes/param x params/s of the same-traffic pass)
//            = t(same-traffic pass) / t(kernel)            (for the simd bf16 case)
// and, for every line, GB/s divided by the triad's GB/s as a second, STREAM-convention figure.
//
// The lean lines' roofline fraction compares their GB/s with the same-traffic pass's: a lean pass at
// 100% moves its (fewer) bytes as fast as DRAM moves fp32's.
//
// --avx2=1 masks Highway's AVX-512 targets (hwy::SetSupportedTargetsForTest: DisableTargets does
// not change a dispatch already made), which both the exact kernel and the lean one
// (optim/lean_kernel.h block_kernel) honour: the rates of a host without AVX-512.
//
//   cpu_adamw_bench [--params=N] [--threads=T] [--steps=K] [--lean-only=1] [--avx2=1]
#include <hwy/targets.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"
#include "optim/lean_adamw.h"
#include "optim/lean_kernel.h"
#include "optim/state_format.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Best of `steps` timed runs after one untimed run.
double best_seconds(int steps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// Best of `steps` runs of fn in CPU seconds of the whole process (every thread's), after one
// untimed run: on a machine shared with other work the wall time measures the share of the cores
// this process got, the CPU time what the pass costs per thread.
double best_cpu_seconds(int steps, const std::function<void()>& fn) {
  const auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  fn();
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    const double start = cpu_now();
    fn();
    best = std::min(best, cpu_now() - start);
  }
  return best;
}

// First-touch every buffer from the pool's threads, in the partition the kernels use, so pages sit
// near the threads that update them.
void parallel_fill(ThreadPool& pool, float* p, size_t n, float value) {
  pool.parallel_for(
      n, [&](size_t b, size_t e) { std::fill(p + b, p + e, value); }, size_t{1} << 16);
}

void report(const char* what, size_t n, double seconds, double bytes_per_param, double roof_gbs,
            double triad_gbs) {
  const double params_per_s = static_cast<double>(n) / seconds;
  const double gbs = params_per_s * bytes_per_param / 1e9;
  std::printf(
      "%-36s %8.2f ms  %6.2f G params/s  %6.1f GB/s (%2.0f B/param)  roofline %5.1f%%  triad %5.1f%%\n", what,
      seconds * 1e3, params_per_s / 1e9, gbs, bytes_per_param, 100.0 * gbs / roof_gbs,
      100.0 * gbs / triad_gbs);
}

size_t arg_value(int argc, char** argv, const char* name, size_t fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::strtoull(argv[i] + prefix.size(), nullptr, 10);
  }
  return fallback;
}

// Frees the fp32 buffers before the lean formats allocate theirs.
void release(std::initializer_list<std::vector<float>*> buffers) {
  for (std::vector<float>* b : buffers) std::vector<float>().swap(*b);
}

// One lean format's step over n parameters, as the engine runs it: bf16 gradients in the pinned
// buffer that receives the new bf16 weights. The state starts as a run's would after a few steps
// (masters and moments of ordinary size), so the encoders see every code range.
void bench_lean(OptimizerStateFormat format, ThreadPool& pool, size_t n, int steps, double roof_gbs,
                double triad_gbs) {
  std::vector<std::vector<char>> arrays;
  std::vector<void*> bases;
  for (const StateArraySpec& a : state_arrays(format)) {
    arrays.emplace_back(state_array_bytes(a.kind, n));
    bases.push_back(arrays.back().data());
  }
  const LeanUnitState s = lean_unit_view(format, n, bases, 1);
  std::vector<uint16_t> staging(n);
  std::vector<float> init(size_t{1} << 16);
  for (size_t i = 0; i < init.size(); ++i) init[i] = 0.02f * std::sin(0.37f * static_cast<float>(i));
  pool.parallel_for(
      n,
      [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i += init.size())
          lean_write_masters(s, init.data(), i, std::min(e, i + init.size()));
        std::memset(s.m_q + b, 0, e - b);
        std::memset(s.v_q + b, 0, e - b);
      },
      size_t{1} << 16);
  std::memset(s.m_scale, 0, (n + kStateBlock - 1) / kStateBlock * sizeof(float));
  std::memset(s.v_scale, 0, (n + kStateBlock - 1) / kStateBlock * sizeof(float));
  AdamWHyper h;
  h.lr = 1e-5;
  h.weight_decay = 0.01;
  const AdamWSegment all{0, n, true};
  int64_t step = 1;
  const auto fill_grads = [&] {
    pool.parallel_for(
        n,
        [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i)
            staging[i] = f32_to_bf16(1e-3f * std::cos(0.11f * static_cast<float>(i & 1023)));
        },
        size_t{1} << 16);
  };
  fill_grads();
  for (int k = 0; k < 3; ++k)
    lean_adamw_step(s, {&all, 1}, staging.data(), DType::BF16, nullptr, h, step++, 1.0f, pool);
  // The gradient buffer is overwritten by each step's bf16 copy; the timed steps read those values
  // as gradients (of the size of the weights, ordinary numbers: the same work per element).
  const double seconds = best_seconds(steps, [&] {
    lean_adamw_step(s, {&all, 1}, staging.data(), DType::BF16, staging.data(), h, step++, 1.0f, pool);
  });
  const std::string what = std::string("lean ") + state_format_name(format) + ", bf16 grads, bf16 copy";
  report(what.c_str(), n, seconds, adamw_traffic_bytes_per_param(format), roof_gbs, triad_gbs);
  const double cpu = best_cpu_seconds(steps, [&] {
    lean_adamw_step(s, {&all, 1}, staging.data(), DType::BF16, staging.data(), h, step++, 1.0f, pool);
  });
  std::printf("%-36s %8.2f ms CPU  %6.3f G params per thread-second of CPU\n", "", cpu * 1e3,
              static_cast<double>(n) / cpu / 1e9);
}

int run(int argc, char** argv) {
  const size_t n = arg_value(argc, argv, "params", 100'000'000);
  const size_t threads = arg_value(argc, argv, "threads", 0);
  const int steps = static_cast<int>(arg_value(argc, argv, "steps", 5));
  const bool lean_only = arg_value(argc, argv, "lean-only", 0) != 0;
  if (arg_value(argc, argv, "avx2", 0) != 0)
    hwy::SetSupportedTargetsForTest(hwy::SupportedTargets() & ~(HWY_AVX3 | HWY_AVX3_DL));
  ThreadPool::set_global_threads(threads);
  ThreadPool& pool = ThreadPool::global();  // the reference runs on the global pool; use the same
  std::printf("cpu_adamw_bench: %zu params, %zu threads, SIMD target %s, lean kernel %s\n", n, pool.size(),
              cpu_adamw_target(), lean::block_kernel_target());

  // Correctness first: the kernel against the reference on a slice, bit for bit.
  {
    const size_t k = 100'003;
    std::vector<float> p1(k), m1(k, 0.01f), v1(k, 0.02f), g(k);
    for (size_t i = 0; i < k; ++i) {
      p1[i] = std::sin(0.001f * i);
      g[i] = bf16_to_f32(f32_to_bf16(std::cos(0.003f * i)));
    }
    std::vector<float> p2 = p1, m2 = m1, v2 = v1;
    std::vector<uint16_t> g16(k), out(k);
    for (size_t i = 0; i < k; ++i) g16[i] = f32_to_bf16(g[i]);
    AdamWHyper h;
    h.lr = 1e-3;
    h.weight_decay = 0.1;
    const AdamWSegment all{0, k, true};
    cpu_adamw_step({p1.data(), m1.data(), v1.data(), g16.data(), DType::BF16, out.data()}, {&all, 1}, h, 3,
                   0.5f, pool);
    adamw_step(p2.data(), m2.data(), v2.data(), g.data(), k, h, 3, true, 0.5f);
    bool same = std::memcmp(p1.data(), p2.data(), k * 4) == 0 &&
                std::memcmp(m1.data(), m2.data(), k * 4) == 0 &&
                std::memcmp(v1.data(), v2.data(), k * 4) == 0;
    for (size_t i = 0; i < k && same; ++i) same = out[i] == f32_to_bf16(p2[i]);
    std::printf("check against adamw_step: %s\n", same ? "bit-identical" : "MISMATCH");
    if (!same) return 1;
  }

  std::vector<float> master(n), m(n), v(n), grad(n), c(n);
  std::vector<uint16_t> grad16(n), out(n);
  parallel_fill(pool, master.data(), n, 0.5f);
  parallel_fill(pool, m.data(), n, 0.01f);
  parallel_fill(pool, v.data(), n, 0.02f);
  parallel_fill(pool, grad.data(), n, 0.25f);
  parallel_fill(pool, c.data(), n, 1.0f);
  pool.parallel_for(
      n,
      [&](size_t b, size_t e) {
        std::fill(grad16.data() + b, grad16.data() + e, f32_to_bf16(0.25f));
        std::fill(out.data() + b, out.data() + e, uint16_t{0});
      },
      size_t{1} << 16);

  // Attainable bandwidth: a = b + s*c over three n-float arrays (reusing master, grad, c).
  const double triad_s = best_seconds(steps, [&] {
    pool.parallel_for(
        n,
        [&](size_t b, size_t e) {
          float* a = master.data();
          const float* x = grad.data();
          const float* y = c.data();
          for (size_t i = b; i < e; ++i) a[i] = x[i] + 0.5f * y[i];
        },
        size_t{1} << 16);
  });
  const double triad_gbs = 12.0 * n / triad_s / 1e9;
  std::printf("%-36s %8.2f ms  %6.1f GB/s (12 B/element)\n", "triad (STREAM convention)", triad_s * 1e3,
              triad_gbs);
  // The simd bf16 case's traffic with no AdamW arithmetic: read bf16 g, master, m, v; write master,
  // m, v and a bf16 value.
  const double traffic_s = best_seconds(steps, [&] {
    pool.parallel_for(
        n,
        [&](size_t b, size_t e) {
          float* pm = master.data();
          float* mm = m.data();
          float* vm = v.data();
          const uint16_t* g = grad16.data();
          uint16_t* o = out.data();
          for (size_t i = b; i < e; ++i) {
            const float gi = bf16_to_f32(g[i]);
            const float p = pm[i] + gi * 0.0f;
            pm[i] = p;
            mm[i] = mm[i] + gi * 0.0f;
            vm[i] = vm[i] + gi * 0.0f;
            uint32_t bits;
            std::memcpy(&bits, &p, 4);
            o[i] = static_cast<uint16_t>(bits >> 16);
          }
        },
        size_t{1} << 16);
  });
  const double roof_gbs = 26.0 * n / traffic_s / 1e9;
  std::printf("%-36s %8.2f ms  %6.1f GB/s (26 B/param): the roofline\n", "same-traffic pass, no arithmetic",
              traffic_s * 1e3, roof_gbs);
  parallel_fill(pool, master.data(), n, 0.5f);
  if (lean_only) {
    release({&master, &m, &v, &grad, &c});
    for (auto format :
         {OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8})
      bench_lean(format, pool, n, steps, roof_gbs, triad_gbs);
    return 0;
  }

  AdamWHyper h;
  h.lr = 1e-5;  // small, so the masters stay finite over many timed steps
  h.weight_decay = 0.01;
  const AdamWSegment all{0, n, true};
  int64_t step = 1;
  const double simd_bf16 = best_seconds(steps, [&] {
    cpu_adamw_step({master.data(), m.data(), v.data(), grad16.data(), DType::BF16, out.data()}, {&all, 1}, h,
                   step++, 1.0f, pool);
  });
  report("simd, bf16 grads, bf16 copy", n, simd_bf16, 26.0, roof_gbs, triad_gbs);
  const double simd_cpu = best_cpu_seconds(steps, [&] {
    cpu_adamw_step({master.data(), m.data(), v.data(), grad16.data(), DType::BF16, out.data()}, {&all, 1}, h,
                   step++, 1.0f, pool);
  });
  std::printf("%-36s %8.2f ms CPU  %6.3f G params per thread-second of CPU\n", "", simd_cpu * 1e3,
              static_cast<double>(n) / simd_cpu / 1e9);
  const double simd_no_copy = best_seconds(steps, [&] {
    cpu_adamw_step({master.data(), m.data(), v.data(), grad16.data(), DType::BF16, nullptr}, {&all, 1}, h,
                   step++, 1.0f, pool);
  });
  report("simd, bf16 grads, no copy", n, simd_no_copy, 24.0, roof_gbs, triad_gbs);
  std::printf("without the bf16 copy (convert-on-upload) the pass takes %.3fx the time\n",
              simd_no_copy / simd_bf16);
  const double simd_f32 = best_seconds(steps, [&] {
    cpu_adamw_step({master.data(), m.data(), v.data(), grad.data(), DType::F32, out.data()}, {&all, 1}, h,
                   step++, 1.0f, pool);
  });
  report("simd, fp32 grads, bf16 copy", n, simd_f32, 30.0, roof_gbs, triad_gbs);
  const double reference = best_seconds(
      steps, [&] { adamw_step(master.data(), m.data(), v.data(), grad.data(), n, h, step++, true, 1.0f); });
  report("reference adamw_step, fp32 grads", n, reference, 28.0, roof_gbs, triad_gbs);
  std::printf(
      "roofline = GB/s / same-traffic GB/s; triad = GB/s / triad GB/s; simd bf16 is %.2fx the reference\n",
      reference / simd_bf16);
  release({&master, &m, &v, &grad, &c});
  for (auto format :
       {OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8})
    bench_lean(format, pool, n, steps, roof_gbs, triad_gbs);
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  return ferry::run(argc, argv);
}
