// CudaOps' construction, its working memory and the device-side error flag.
#include <cstdlib>
#include <string>

#include "core/env_switch.h"
#include "ops/cuda/cuda_ops_state.cuh"
#include "ops/gemm_tuning.h"

namespace ferry {

bool gemm_tuning_default() {
  return env_switch_on("FERRY_GEMM_TUNING");
}

int gemm_candidates_default() {
  return gemm_candidates_from_env(std::getenv("FERRY_GEMM_CANDIDATES"));
}

namespace {

// What CudaOps::gemm_choice_scope says for the current device; empty without tuning.
std::string gemm_choice_scope_of(const CudaOpsOptions& options) {
  if (!options.gemm_tuning || options.gemm_candidates < 2) return "";
  int device = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return std::string(properties.name) + ", sm_" + std::to_string(properties.major) +
         std::to_string(properties.minor) + ", " + std::to_string(properties.multiProcessorCount) +
         " SMs, cuBLASLt " + std::to_string(cublasLtGetVersion()) + ", " +
         std::to_string(options.gemm_workspace_bytes >> 20) + " MiB workspace, tuned among " +
         std::to_string(options.gemm_candidates);
}

// The options' invariants, checked before anything is built from them.
const CudaOpsOptions& checked(const CudaOpsOptions& options) {
  CUDA_OPS_EXPECT(options.flce_chunk_bytes > 0, "CudaOps", "flce_chunk_bytes must be positive");
  CUDA_OPS_EXPECT(options.gemm_candidates >= 1, "CudaOps", "gemm_candidates must be at least 1");
  return options;
}

}  // namespace

CudaOps::State::State(cudaStream_t s, size_t gemm_workspace_bytes, WorkspaceAllocator workspace_allocator,
                      int gemm_candidates)
    : stream(s),
      allocator(std::move(workspace_allocator)),
      gemm(gemm_workspace_bytes, s, &allocator, gemm_candidates) {
  for (auto& buffer : scratch) buffer.use_allocator(&allocator);
  int device = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  error_flag = cuda::device_alloc(sizeof(int), "the ops' error flag");
  FERRY_CUDA_CHECK(cudaMemsetAsync(error_flag.get(), 0, sizeof(int), stream));
}

CudaOps::CudaOps(void* stream, const CudaOpsOptions& options)
    : options_(checked(options)),
      state_(std::make_unique<State>(static_cast<cudaStream_t>(stream), options.gemm_workspace_bytes,
                                     options.allocator, options.gemm_tuning ? options.gemm_candidates : 1)),
      gemm_choice_scope_(gemm_choice_scope_of(options)) {
  if (options_.cudnn_attention) state_->cudnn_attention = CudnnAttention::make(stream);
}

CudaOps::~CudaOps() = default;

std::string CudaOps::kernels() const {
  const std::string gemms = gemm_tuning_label(options_.gemm_tuning, options_.gemm_candidates);
  if (state_->cudnn_attention == nullptr) return name() + gemms;
  return "cuda, cuDNN " + std::to_string(CudnnAttention::library_version()) + " attention" + gemms;
}

int64_t CudaOps::tuning_calls() const {
  return state_->gemm.tuning_calls();
}

std::string CudaOps::gemm_choice_scope() const {
  return gemm_choice_scope_;
}

std::vector<GemmChoice> CudaOps::gemm_choices() const {
  return state_->gemm.settled_choices();
}

void CudaOps::adopt_gemm_choices(const std::vector<GemmChoice>& choices) {
  state_->gemm.adopt(choices);
}

bool CudaOps::has_library_attention() const {
  return state_->cudnn_attention != nullptr;
}

void CudaOps::use_library_attention(bool forward, bool backward) {
  state_->cudnn_forward = forward;
  state_->cudnn_backward = backward;
}

void* CudaOps::stream() const {
  return state_->stream;
}

size_t CudaOps::workspace_bytes() const {
  size_t total = state_->gemm.workspace_bytes();
  for (const auto& s : state_->scratch) total += s.capacity();
  return total;
}

std::string CudaOps::device_error() {
  int flag = 0;
  FERRY_CUDA_CHECK(
      cudaMemcpyAsync(&flag, state_->error_flag.get(), sizeof(int), cudaMemcpyDeviceToHost, state_->stream));
  FERRY_CUDA_CHECK(cudaStreamSynchronize(state_->stream));
  if (flag == 0) return "";
  FERRY_CUDA_CHECK(cudaMemsetAsync(state_->error_flag.get(), 0, sizeof(int), state_->stream));
  std::string what;
  if (flag & cuda::kBadTokenId)
    what += "a token id outside the vocabulary reached the embedding (its rows were set to NaN); ";
  if (flag & cuda::kBadTarget)
    what +=
        "a loss target outside the vocabulary (and not -100) reached the cross-entropy (the loss is NaN); ";
  return what + "tokenize the data with the model's own tokenizer";
}

std::unique_ptr<Ops> make_cuda_ops(void* stream, WorkspaceAllocator allocator) {
  CudaOpsOptions options;
  options.allocator = std::move(allocator);
  return std::make_unique<CudaOps>(stream, options);
}

}  // namespace ferry
