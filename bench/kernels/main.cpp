// ferry_kernel_bench: the harness of every CUDA kernel family (DESIGN.md §6.8). Each family first
// checks a few shapes against the CPU reference (printing "check ... ok/FAIL"), then times the
// kernels at training sizes with CUDA events (median of --reps after --warmup calls, L2 flushed
// before each timed call where the working set could sit in L2) and prints a markdown table of
// time, bandwidth or FLOP rate, and the fraction of the H200's roofline.
//
//   ferry_kernel_bench --kernel
//   all|gemm|gemm_candidates|head_gemms|rmsnorm|rope|swiglu|embedding|flce|adamw|attention_cached
//                      [--reps N] [--warmup N]
//
// Exit status 1 when a reference check failed (timings of a failed family are still printed).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "bench_common.h"

namespace {

struct Family {
  const char* name;
  void (*run)(ferry::bench::Bench&);
};

const Family kFamilies[] = {
    {"gemm", ferry::bench::bench_gemm},
    {"gemm_candidates", ferry::bench::bench_gemm_candidates},
    {"head_gemms", ferry::bench::bench_head_gemms},
    {"rmsnorm", ferry::bench::bench_rmsnorm},
    {"rope", ferry::bench::bench_rope},
    {"swiglu", ferry::bench::bench_swiglu},
    {"embedding", ferry::bench::bench_embedding},
    {"flce", ferry::bench::bench_flce},
    {"adamw", ferry::bench::bench_adamw},
    {"attention_cached", ferry::bench::bench_attention_cached},
};

int usage() {
  std::fprintf(stderr, "usage: ferry_kernel_bench [--kernel all");
  for (const Family& f : kFamilies) std::fprintf(stderr, "|%s", f.name);
  std::fprintf(stderr, "] [--reps N (20)] [--warmup N (3)]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kernel = "all";
  int reps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--kernel" || a == "-k") && i + 1 < argc) {
      kernel = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--warmup" && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else {
      return usage();
    }
  }
  if (reps < 1 || warmup < 0) return usage();
  bool known = kernel == "all";
  for (const Family& f : kFamilies) known = known || kernel == f.name;
  if (!known) return usage();
  try {
    ferry::bench::Bench bench(reps, warmup);
    for (const Family& f : kFamilies) {
      if (kernel != "all" && kernel != f.name) continue;
      std::printf("\n== %s\n", f.name);
      std::fflush(stdout);
      try {
        f.run(bench);
      } catch (const std::exception& e) {
        bench.check(std::string(f.name) + " (aborted)", false, e.what());
      }
    }
    bench.print_table();
    return bench.failed() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry_kernel_bench: %s\n", e.what());
    return 1;
  }
}
