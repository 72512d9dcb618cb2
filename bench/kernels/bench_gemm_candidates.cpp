// The layer GEMMs of the whole-GPU Llama-3.2-1B and -3B (one micro-chunk of 65,536 tokens) and of
// the Llama-3.1-8B at 24 GiB (micro-chunks of 4 x 2,048 tokens), each as the engine calls it, with cuBLASLt's
// heuristic's first algorithm, tuned among kNarrowCandidates (the default until choices were kept per
// machine) and among kGemmTuneAlgos candidates (the default): whether timing more of the heuristic's
// candidates finds faster algorithms for the shapes that take most of those steps. Each is timed with the GPU
// resting between calls and back to back (a step's condition): an algorithm's lead in one need not hold in
// the other.
//
// head_gemms: the same for the three products of one logits chunk of the fused linear-cross-entropy
// (CudaOps::linear_cross_entropy: 2,048 tokens of a 128,256 vocabulary at 512 MiB chunks): logits =
// x w^T, dx = dlogits w (the vocabulary as the inner dimension) and dw += dlogits^T x (fp32, the
// chunk's tokens as the inner dimension), which take all of the head's time but its cross-entropy
// pass: which of them runs under the layer products' rate.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ops/cuda_ops_sizes.h"
#include "ops/ops.h"

namespace ferry::bench {

namespace {

constexpr int kNarrowCandidates = 6;

struct Shape {
  const char* name;
  int64_t in, out;
  bool residual;    // the forward adds the residual stream (o_proj, down_proj)
  bool accumulate;  // the backward's dx adds to another product's (k, v, up)
};

struct Model {
  const char* name;
  int64_t tokens;
  std::vector<Shape> shapes;
};

// Every product of every shape of `models`, with each of three CudaOps: the heuristic's first
// algorithm, tuned among kNarrowCandidates and among kGemmTuneAlgos.
void time_products(Bench& b, const std::vector<Model>& models) {
  std::vector<std::unique_ptr<CudaOps>> variants;
  std::vector<std::string> labels;
  for (const int candidates : {1, kNarrowCandidates, kGemmTuneAlgos}) {
    CudaOpsOptions options;
    options.gemm_tuning = candidates > 1;
    options.gemm_candidates = candidates;
    variants.push_back(std::make_unique<CudaOps>(b.stream(), options));
    labels.push_back(candidates == 1 ? "heuristic" : "tuned among " + std::to_string(candidates));
  }
  const Tensor none;
  for (const Model& m : models) {
    const int64_t tokens = m.tokens;
    for (const Shape& s : m.shapes) {
      DeviceTensor x(DType::BF16, {tokens, s.in}), w(DType::BF16, {s.out, s.in}),
          y(DType::BF16, {tokens, s.out});
      DeviceTensor dy(DType::BF16, {tokens, s.out}), dx(DType::BF16, {tokens, s.in}),
          dw(DType::F32, {s.out, s.in});
      fill_random(x, 1), fill_random(w, 2, -0.02f, 0.02f), fill_random(dy, 3), fill_random(dw, 4);
      fill_random(y, 5), fill_random(dx, 6);
      const double flops = 2.0 * tokens * s.in * s.out;
      struct Product {
        const char* name;
        std::function<void(CudaOps&)> run;
      };
      const Product products[] = {
          {s.residual ? "fwd +residual" : "fwd",
           [&](CudaOps& o) { o.linear_forward(x.t, w.t, none, s.residual ? y.t : none, y.t); }},
          {s.accumulate ? "bwd dx +=" : "bwd dx",
           [&](CudaOps& o) { o.linear_backward(x.t, w.t, dy.t, dx.t, none, none, s.accumulate); }},
          {"bwd dw (F32, +=)",
           [&](CudaOps& o) { o.linear_backward(x.t, w.t, dy.t, none, dw.t, none, false); }},
      };
      for (const Product& p : products) {
        // Tuning runs on the first calls: drive each variant through it before any timing, L2
        // flushed before each call as the timed calls are (a step's products find their operands
        // evicted by the kernels between them; without the flush the trials favour other algorithms).
        for (size_t v = 0; v < variants.size(); ++v)
          for (int i = 0; i < variants[v]->calls_to_steady_speed(); ++i) {
            b.flush_l2(i);
            p.run(*variants[v]);
          }
        FERRY_CUDA_CHECK(cudaStreamSynchronize(b.stream()));
        // Timed in turn and back (A B C C B A) so that no variant gets the cooler GPU; each call
        // alone (the GPU rests between calls), then back to back (as in a step).
        char shape[96];
        std::snprintf(shape, sizeof shape, "%s %s T=%lld %lldx%lld", m.name, s.name, (long long)tokens,
                      (long long)s.out, (long long)s.in);
        for (const bool back_to_back : {false, true}) {
          const auto time = [&](size_t v) {
            const auto call = [&] { p.run(*variants[v]); };
            return back_to_back ? b.time_us_back_to_back(call) : b.time_us(call);
          };
          std::vector<double> us(variants.size(), 0.0);
          for (size_t v = 0; v < variants.size(); ++v) us[v] += time(v);
          for (size_t v = variants.size(); v-- > 0;) us[v] += time(v);
          for (size_t v = 0; v < variants.size(); ++v) {
            const double t = 0.5 * us[v];
            char note[160];
            std::snprintf(note, sizeof note, "%s%s: %.0f TFLOP/s, %+.1f%% against the heuristic's",
                          labels[v].c_str(), back_to_back ? ", back to back" : "", flops / t * 1e-6,
                          100.0 * (0.5 * us[0] / t - 1.0));
            b.add({std::string("linear ") + p.name, shape, t, 0, flops, note});
          }
        }
      }
    }
  }
}

}  // namespace

void bench_gemm_candidates(Bench& b) {
  time_products(b, {
                       {"1B",
                        65536,
                        {{"o", 2048, 2048, true, false},
                         {"k/v", 2048, 512, false, true},
                         {"gate/up", 2048, 8192, false, true},
                         {"down", 8192, 2048, true, false}}},
                       {"3B",
                        65536,
                        {{"o", 3072, 3072, true, false},
                         {"k/v", 3072, 1024, false, true},
                         {"gate/up", 3072, 8192, false, true},
                         {"down", 8192, 3072, true, false}}},
                       {"8B",
                        8192,
                        {{"o", 4096, 4096, true, false},
                         {"k/v", 4096, 1024, false, true},
                         {"gate/up", 4096, 14336, false, true},
                         {"down", 14336, 4096, true, false}}},
                   });
}

void bench_head_gemms(Bench& b) {
  // One logits chunk (kCudaFlceChunkBytes of bf16 logits) of the 1B's head (tied to its embedding:
  // its weight gradient in fp32, updated on the GPU) and of the 8B's, and the 1B's at chunks 4x as
  // long (the weight gradient read and written a quarter as often).
  const int64_t V = 128256, chunk = fused_cross_entropy_chunk_tokens(kCudaFlceChunkBytes, V);
  time_products(b, {{"1B head chunk", chunk, {{"head", 2048, V, false, false}}},
                    {"8B head chunk", chunk, {{"head", 4096, V, false, false}}},
                    {"1B head 4x chunk", 4 * chunk, {{"head", 2048, V, false, false}}}});
}

}  // namespace ferry::bench
