#include <functional>
#include <string>

#include "core/log_line.h"
#include "ops/cuda/cuda_gemm.cuh"
#include "ops/gemm_tuning.h"

namespace ferry::cuda {

namespace {

#define CHECK_CUBLAS(call)                                                                          \
  do {                                                                                              \
    const cublasStatus_t status_ = (call);                                                          \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                                           \
      ::ferry::cuda::raise_cuda_error(cublasLtGetStatusString(status_), #call, __FILE__, __LINE__); \
  } while (0)

// The largest power of two (<= 256) that divides the address: what the heuristic may assume.
int alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (a % static_cast<uintptr_t>(align)) != 0) align /= 2;
  return align;
}

const char* type_name(int t) {
  switch (static_cast<cudaDataType_t>(t)) {
    case CUDA_R_32F:
      return "F32";
    case CUDA_R_16BF:
      return "BF16";
    case CUDA_R_16F:
      return "F16";
    default:
      return "?";
  }
}

// An algorithm's configuration as cuBLASLt numbers it (cublasLt.h's enums), for the debug log.
std::string lt_algo_name(const cublasLtMatmulAlgo_t& algo) {
  const auto get = [&algo](cublasLtMatmulAlgoConfigAttributes_t attribute, auto value) {
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written) !=
        CUBLAS_STATUS_SUCCESS)
      return std::string("?");
    return std::to_string(value);
  };
  return "algo " + get(CUBLASLT_ALGO_CONFIG_ID, int32_t{0}) + " tile " +
         get(CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t{0}) + " stages " +
         get(CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t{0}) + " splitK " +
         get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t{0}) + " reduction " +
         get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, uint32_t{0}) + " swizzle " +
         get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t{0}) + " custom " +
         get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t{0}) + " inner " +
         get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, uint16_t{0}) + " cluster " +
         get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t{0});
}

}  // namespace

cudaDataType_t lt_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      break;
  }
  raise("cuda", std::string("no cuBLASLt type for dtype ") + std::string(dtype_name(dtype)));
}

bool Gemm::Key::operator==(const Key& o) const {
  return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldd == o.ldd &&
         a_type == o.a_type && b_type == o.b_type && d_type == o.d_type && trans_a == o.trans_a &&
         trans_b == o.trans_b && bias == o.bias && accumulate == o.accumulate && align_a == o.align_a &&
         align_b == o.align_b && align_c == o.align_c && align_d == o.align_d;
}

size_t Gemm::KeyHash::operator()(const Key& k) const {
  size_t h = 0;
  auto mix = [&h](int64_t v) { h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(k.m);
  mix(k.n);
  mix(k.k);
  mix(k.lda);
  mix(k.ldb);
  mix(k.ldd);
  mix(k.a_type | (k.b_type << 8) | (k.d_type << 16));
  mix((k.trans_a ? 1 : 0) | (k.trans_b ? 2 : 0) | (k.bias ? 4 : 0) | (k.accumulate ? 8 : 0));
  mix(k.align_a | (k.align_b << 10) | (k.align_c << 20) | (static_cast<int64_t>(k.align_d) << 30));
  return h;
}

std::string Gemm::problem_name(const Key& key) {
  return "m=" + std::to_string(key.m) + " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) +
         " (A " + type_name(key.a_type) + (key.trans_a ? "^T" : "") + " lda=" + std::to_string(key.lda) +
         ", B " + type_name(key.b_type) + (key.trans_b ? "^T" : "") + " ldb=" + std::to_string(key.ldb) +
         ", D " + type_name(key.d_type) + " ldd=" + std::to_string(key.ldd) + (key.bias ? ", bias" : "") +
         (key.accumulate ? ", beta != 0" : "") + ", alignments " + std::to_string(key.align_a) + "/" +
         std::to_string(key.align_b) + "/" + std::to_string(key.align_c) + "/" + std::to_string(key.align_d) +
         " bytes)";
}

Gemm::Gemm(size_t workspace_bytes, cudaStream_t stream, const WorkspaceAllocator* allocator, int candidates)
    : workspace_bytes_(workspace_bytes), candidates_(candidates < 1 ? 1 : candidates) {
  cublasLtHandle_t h = nullptr;
  CHECK_CUBLAS(cublasLtCreate(&h));
  handle_.reset(h);
  workspace_.use_allocator(allocator);
  if (workspace_bytes_ > 0) workspace_.get(workspace_bytes_, stream, "the cuBLASLt workspace");
}

Gemm::~Gemm() {
  for (auto& entry : cache_)
    for (const Trial& t : entry.second->pending) {
      cudaEventDestroy(t.start);
      cudaEventDestroy(t.stop);
    }
}

std::unique_ptr<Gemm::Plan> Gemm::make_plan(const Key& key) const {
  auto plan = std::make_unique<Plan>();
  cublasLtMatmulDesc_t desc = nullptr;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan->desc.reset(desc);
  const cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtEpilogue_t epilogue = key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (key.bias) {
    // The bias has D's dtype (the default); set explicitly so the contract is visible.
    const cudaDataType_t bias_type = static_cast<cudaDataType_t>(key.d_type);
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
  }

  // Stored shapes: A is (m,k) or, transposed, (k,m); B is (k,n) or (n,k); D is (m,n).
  cublasLtMatrixLayout_t layout = nullptr;
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout, static_cast<cudaDataType_t>(key.a_type),
                                          key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda));
  plan->a.reset(layout);
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout, static_cast<cudaDataType_t>(key.b_type),
                                          key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n, key.ldb));
  plan->b.reset(layout);
  CHECK_CUBLAS(
      cublasLtMatrixLayoutCreate(&layout, static_cast<cudaDataType_t>(key.d_type), key.m, key.n, key.ldd));
  plan->d.reset(layout);

  cublasLtMatmulPreference_t pref_raw = nullptr;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref_raw));
  LtPreference pref(pref_raw);
  const uint64_t ws = workspace_bytes_;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                    sizeof(ws)));
  const uint32_t align_a = static_cast<uint32_t>(key.align_a), align_b = static_cast<uint32_t>(key.align_b),
                 align_d = static_cast<uint32_t>(key.align_d);
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &align_a, sizeof(align_a)));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &align_b, sizeof(align_b)));
  const uint32_t align_c = static_cast<uint32_t>(key.align_c);
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &align_c, sizeof(align_c)));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &align_d, sizeof(align_d)));
  if (key.accumulate && key.d_type != CUDA_R_32F) {
    // A split-K "in place" reduction sums the partial products in D's buffer and dtype, and an
    // "output type" one in a workspace of that dtype: in bf16 either rounds the sum several times
    // (seen as errors of several ulps when dw accumulated with beta = 1). Partials in fp32 keep
    // C + product rounded once.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                      &schemes, sizeof(schemes)));
  }

  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates_));
  int returned = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_.get(), desc, plan->a.get(), plan->b.get(), plan->d.get(),
                                     plan->d.get(), pref_raw, candidates_, results.data(), &returned);
  for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->algos.push_back(results[i].algo);
  if (plan->algos.empty()) {
    raise("cuda", "cuBLASLt has no algorithm for the product " + problem_name(key) + ": " +
                      cublasLtGetStatusString(status));
  }
  plan->tuned = plan->algos.size() == 1;
  plan->trials = GemmTrials(plan->algos.size(), kTuneSamples);
  return plan;
}

void Gemm::collect_trials(const Key& key, Plan& plan) {
  auto done = plan.pending.begin();
  for (; done != plan.pending.end(); ++done) {
    // Calls on one stream complete in order: the first trial still running ends the scan.
    const cudaError_t state = cudaEventQuery(done->stop);
    if (state == cudaErrorNotReady) break;
    FERRY_CUDA_CHECK(state);
    float ms = 0.0f;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, done->start, done->stop));
    plan.trials.filed(done->algo, ms);
    FERRY_CUDA_CHECK(cudaEventDestroy(done->start));
    FERRY_CUDA_CHECK(cudaEventDestroy(done->stop));
  }
  plan.pending.erase(plan.pending.begin(), done);
  if (!plan.pending.empty() || !plan.trials.complete()) return;
  plan.chosen = plan.trials.choose(kTuneMargin);
  plan.tuned = true;
  settle(key, plan);
  if (log_enabled(LogLevel::Debug)) {
    std::vector<std::string> names;
    for (const cublasLtMatmulAlgo_t& algo : plan.algos) names.push_back(lt_algo_name(algo));
    log_line(LogLevel::Debug, "GEMM tuned, " + problem_name(key) + ": " +
                                  gemm_tuning_summary(names, plan.trials, plan.chosen));
  }
}

void Gemm::take_adopted(const Key& key, Plan& plan) {
  if (plan.tuned || adopted_.empty()) return;
  const auto found = adopted_.find(problem_name(key));
  if (found == adopted_.end()) return;
  const GemmChoice& choice = found->second;
  if (choice.candidate >= plan.algos.size() || lt_algo_name(plan.algos[choice.candidate]) != choice.config) {
    log_line(LogLevel::Debug, "GEMM choice made before for " + choice.problem + " (candidate " +
                                  std::to_string(choice.candidate) + ", " + choice.config +
                                  ") is not among cuBLASLt's candidates now; tuning it again");
    return;
  }
  plan.chosen = choice.candidate;
  plan.tuned = true;
  settle(key, plan);
}

void Gemm::settle(const Key& key, const Plan& plan) {
  if (plan.algos.size() < 2) return;
  const GemmChoice choice{problem_name(key), plan.chosen, lt_algo_name(plan.algos[plan.chosen])};
  const std::lock_guard<std::mutex> lock(settled_mutex_);
  settled_[choice.problem] = choice;
}

std::vector<GemmChoice> Gemm::settled_choices() const {
  const std::lock_guard<std::mutex> lock(settled_mutex_);
  std::vector<GemmChoice> choices;
  choices.reserve(settled_.size());
  for (const auto& entry : settled_) choices.push_back(entry.second);
  return choices;
}

void Gemm::adopt(const std::vector<GemmChoice>& choices) {
  for (const GemmChoice& choice : choices) adopted_[choice.problem] = choice;
}

void Gemm::matmul(const MatmulArgs& args, cudaStream_t stream) {
  FERRY_ASSERT(args.m > 0 && args.n > 0 && args.k > 0, "empty products are handled by the caller");
  FERRY_ASSERT(args.bias == nullptr || aligned16(args.bias),
               "the bias epilogue needs a 16-byte aligned bias");
  const void* c = args.c != nullptr ? args.c : args.d;
  Key key{args.m,
          args.n,
          args.k,
          args.lda,
          args.ldb,
          args.ldd,
          static_cast<int>(args.a_type),
          static_cast<int>(args.b_type),
          static_cast<int>(args.d_type),
          args.trans_a,
          args.trans_b,
          args.bias != nullptr,
          args.beta != 0.0f,
          alignment_of(args.a),
          alignment_of(args.b),
          alignment_of(c),
          alignment_of(args.d)};
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    it = cache_.emplace(key, make_plan(key)).first;
    take_adopted(it->first, *it->second);
  }
  Plan& plan = *it->second;
  if (!plan.tuned) collect_trials(it->first, plan);
  if (!plan.tuned) tuning_calls_.fetch_add(1, std::memory_order_relaxed);
  // During tuning, the next candidate's trial; once every trial is issued (their times still to
  // come), the heuristic's first.
  const size_t next = plan.tuned ? GemmTrials::kNone : plan.trials.next();
  const bool trial = next != GemmTrials::kNone;
  size_t algo = trial ? next : plan.chosen;
  Trial timed{algo, nullptr, nullptr};
  if (trial) {
    FERRY_CUDA_CHECK(cudaEventCreate(&timed.start));
    FERRY_CUDA_CHECK(cudaEventCreate(&timed.stop));
    FERRY_CUDA_CHECK(cudaEventRecord(timed.start, stream));
  }
  if (args.bias != nullptr) {
    const void* bias = args.bias;
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
  }
  void* const workspace =
      workspace_bytes_ > 0 ? workspace_.get(workspace_bytes_, stream, "the cuBLASLt workspace") : nullptr;
  const auto launch = [&](size_t i) {
    return cublasLtMatmul(handle_.get(), plan.desc.get(), &args.alpha, args.a, plan.a.get(), args.b,
                          plan.b.get(), &args.beta, c, plan.d.get(), args.d, plan.d.get(), &plan.algos[i],
                          workspace, workspace_bytes_, stream);
  };
  cublasStatus_t status = launch(algo);
  if (status != CUBLAS_STATUS_SUCCESS && algo != 0) {
    // A candidate the heuristic offered that cuBLASLt then refuses to run: it leaves the tuning,
    // and this call runs on the heuristic's first choice (the one used without tuning), timed as
    // one of its trials when this call was one.
    if (!plan.tuned) plan.trials.refused(algo);
    if (plan.chosen == algo) {
      plan.chosen = 0;
      if (plan.tuned) settle(key, plan);
    }
    algo = 0;
    timed.algo = 0;
    status = launch(0);
  }
  CHECK_CUBLAS(status);
  if (trial) {
    FERRY_CUDA_CHECK(cudaEventRecord(timed.stop, stream));
    plan.pending.push_back(timed);
    plan.trials.issued(timed.algo);
  }
}

}  // namespace ferry::cuda
