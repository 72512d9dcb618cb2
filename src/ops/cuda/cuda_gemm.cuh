// Matrix products through cuBLASLt, with a cache of descriptors and heuristic choices.
//
// cuBLASLt is column-major. A row-major (r, c) matrix with row stride ld is the column-major
// (c, r) matrix with the same ld, so every row-major product of ferry is written here as its
// column-major transpose (see linear.cu for the mapping of each product).
//
// Each distinct problem (shape, transposes, leading dims, dtypes, epilogue, pointer alignment)
// gets its descriptors and the heuristic's first algorithms once; later calls only set the bias
// pointer and launch. The cache is keyed by the exact problem, so it grows with the number of
// distinct shapes a run uses (a handful per layer kind), never per step.
//
// Tuning (on by default): the heuristic's first choice is not always the fastest (measured on the
// H200: 678-697 TFLOP/s for the MLP's dx products against 783 for the attention projections). The
// first calls of a problem -- real calls, whose results are used -- go to its first candidates
// (kGemmTuneAlgos unless CudaOpsOptions says otherwise) in turn, kTuneSamples each, timed with events read
// later without blocking (a candidate far slower than the fastest leaves after two: GemmTrials,
// ops/gemm_tuning.h); then the problem keeps the candidate with the lowest median time, or the
// heuristic's first unless another is kTuneMargin faster, so that two runs pick alike where candidates are
// close. A problem whose choice a run before made (ops/gemm_choice.h, adopted) takes it without trials.
// Measured on the H200 (bench_gemm, timed in turn with the heuristic's choice): +7-13% on 4096 x 4096
// products and +19-25% on the 1024 x 4096 dx ones, but -5 to -8% on the 8B MLP's dx products, whose trials
// mislead at a 3% margin and 3 samples (hence 5% and 5); an 8B step moved within noise. Every candidate
// computes the same product with fp32 accumulation (results differ in rounding order only), so
// tuning on the training's own calls needs no scratch memory and works for in-place accumulation.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda_ops_sizes.h"
#include "ops/gemm_choice.h"
#include "ops/gemm_tuning.h"

namespace ferry::cuda {

// D (m, n) = alpha * op(A) op(B) + beta * C [+ bias broadcast over columns], column-major.
// op(A) is (m, k): A is stored (m, k) with lda >= m, or (k, m) with lda >= k when trans_a.
// op(B) is (k, n): B is stored (k, n) with ldb >= k, or (n, k) with ldb >= n when trans_b.
// C has D's dtype and layout and is D itself unless given (cuBLASLt reads C = D in place when the
// two layouts are identical, as here). Compute and scale type fp32; the product is accumulated in
// fp32 and D rounded once: with beta != 0 the plan excludes split-K reductions that sum partial
// products in D's dtype (see make_plan).
struct MatmulArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  cudaDataType_t a_type = CUDA_R_16BF;
  int64_t lda = 0;
  const void* b = nullptr;
  cudaDataType_t b_type = CUDA_R_16BF;
  int64_t ldb = 0;
  void* d = nullptr;
  cudaDataType_t d_type = CUDA_R_16BF;
  int64_t ldd = 0;
  float alpha = 1.0f;
  float beta = 0.0f;           // beta != 0 reads C (D unless c is given) first: accumulation or a residual
  const void* c = nullptr;     // (m, n) of d_type with ld ldd; nullptr: D
  const void* bias = nullptr;  // (m) of d_type, 16-byte aligned; epilogue BIAS when given
};

struct LtHandleDestroy {
  void operator()(cublasLtHandle_t h) const { cublasLtDestroy(h); }
};
struct LtMatmulDescDestroy {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct LtLayoutDestroy {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct LtPreferenceDestroy {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtHandle = CudaHandle<cublasLtHandle_t, LtHandleDestroy>;
using LtMatmulDesc = CudaHandle<cublasLtMatmulDesc_t, LtMatmulDescDestroy>;
using LtLayout = CudaHandle<cublasLtMatrixLayout_t, LtLayoutDestroy>;
using LtPreference = CudaHandle<cublasLtMatmulPreference_t, LtPreferenceDestroy>;

class Gemm {
 public:
  static constexpr int kTuneSamples = kGemmTuneSamples;
  static constexpr float kTuneMargin = kGemmTuneMargin;

  // `candidates`: how many of the heuristic's algorithms each problem's first calls time (1: no
  // tuning, the heuristic's first always).
  Gemm(size_t workspace_bytes, cudaStream_t stream, const WorkspaceAllocator* allocator,
       int candidates = kGemmTuneAlgos);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void matmul(const MatmulArgs& args, cudaStream_t stream);
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Calls so far that ran while their problem's tuning was not finished (Ops::tuning_calls).
  int64_t tuning_calls() const { return tuning_calls_.load(std::memory_order_relaxed); }
  // Ops::gemm_choices: the problems with more than one candidate whose choice is made (by their
  // trials or adopted), one per problem. Any thread.
  std::vector<GemmChoice> settled_choices() const;
  // Ops::adopt_gemm_choices: each problem named here takes its choice when it is first called,
  // without trials, where cuBLASLt still lists the same configuration at that place; others tune.
  // Before the first matmul.
  void adopt(const std::vector<GemmChoice>& choices);

 private:
  struct Key {
    int64_t m, n, k, lda, ldb, ldd;
    int a_type, b_type, d_type;
    bool trans_a, trans_b, bias, accumulate;  // accumulate: beta != 0
    int align_a, align_b, align_c, align_d;   // bytes, 2..256
    bool operator==(const Key& o) const;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // One timed call of a candidate during tuning.
  struct Trial {
    size_t algo;
    cudaEvent_t start, stop;
  };
  struct Plan {
    LtMatmulDesc desc;
    LtLayout a, b, d;
    std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's candidates, best guess first
    size_t chosen = 0;
    bool tuned = false;
    GemmTrials trials;  // per candidate: trials issued, times filed, in or out
    std::vector<Trial> pending;
  };
  std::unique_ptr<Plan> make_plan(const Key& key) const;
  // The problem in words, for errors and the debug log.
  static std::string problem_name(const Key& key);
  // Files the trials that have completed; once every sample is in, chooses (and with
  // FERRY_LOG_LEVEL=debug logs the choice and every candidate's median). Never blocks.
  void collect_trials(const Key& key, Plan& plan);
  // A new plan takes its problem's adopted choice, if any still matches its candidates.
  void take_adopted(const Key& key, Plan& plan);
  // Records the plan's choice among settled_choices().
  void settle(const Key& key, const Plan& plan);

  LtHandle handle_;
  StreamBuffer workspace_;
  size_t workspace_bytes_ = 0;
  int candidates_ = kGemmTuneAlgos;
  std::atomic<int64_t> tuning_calls_{0};
  std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> cache_;
  std::unordered_map<std::string, GemmChoice> adopted_;  // by problem_name
  mutable std::mutex settled_mutex_;
  std::map<std::string, GemmChoice> settled_;  // by problem_name
};

// ferry dtype -> cuBLASLt dtype (F32, BF16, F16).
cudaDataType_t lt_type(DType dtype);

}  // namespace ferry::cuda
