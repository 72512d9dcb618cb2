#include "ops/cuda/cudnn_attention.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cudnn_attention_graphs.h"
#include "ops/cuda/cudnn_backend.h"
#include "ops/cuda/cudnn_library.h"
#include "ops/cuda/ragged_attention_tables.h"

namespace ferry {

struct CudnnAttention::Graphs {
  cudnn::AttentionShape shape;
  cudnn::AttentionGraph forward;
  cudnn::AttentionGraph backward;
  // A ragged batch's tables (cudnn::RaggedTables), at the start of the workspace.
  int64_t tables_bytes = 0;
  // The statistics in cuDNN's layout, after the tables, when they are not ferry's (a batch of more
  // than one row, or a ragged one).
  int64_t statistics_bytes = 0;
  int64_t ahead_bytes() const { return tables_bytes + statistics_bytes; }
  int64_t forward_bytes() const { return ahead_bytes() + forward.workspace_bytes(); }
  int64_t backward_bytes() const { return ahead_bytes() + backward.workspace_bytes(); }
  bool told_short_workspace = false;  // logged once that a call's workspace was too small
  bool failed = false;                // an execution failed: the shape is cuDNN's no more
};

std::unique_ptr<CudnnAttention> CudnnAttention::make(void* stream) {
  const cudnn::Library* lib = cudnn::library();
  if (lib == nullptr) return nullptr;
  try {
    return std::unique_ptr<CudnnAttention>(new CudnnAttention(stream));
  } catch (const cudnn::Failure& e) {
    log_warn("cuDNN is installed but unusable, attention runs on ferry's own kernels: {}", e.what());
    return nullptr;
  }
}

std::string CudnnAttention::unavailable_reason() {
  return cudnn::unavailable_reason();
}

size_t CudnnAttention::library_version() {
  const cudnn::Library* lib = cudnn::library();
  return lib != nullptr ? lib->version : 0;
}

CudnnAttention::CudnnAttention(void* stream) : stream_(stream) {
  const cudnn::Library& lib = *cudnn::library();
  cudnnHandle_t handle = nullptr;
  cudnn::check(lib, lib.create(&handle), "create handle");
  static bool told = false;  // once per process: which library runs attention
  if (!told) {
    told = true;
    log_info("attention: cuDNN {} ({}) for rows that are whole sequences and for packed documents",
             lib.version, lib.path);
  }
  handle_ = handle;
  const cudnnStatus_t status = lib.set_stream(handle, static_cast<cudaStream_t>(stream));
  if (status != CUDNN_STATUS_SUCCESS) {
    lib.destroy(handle);
    cudnn::check(lib, status, "set stream");
  }
}

CudnnAttention::~CudnnAttention() {
  built_.clear();  // plans before the handle they were made with
  if (handle_ != nullptr) cudnn::library()->destroy(static_cast<cudnnHandle_t>(handle_));
}

namespace {

// Statistics between ferry's lse (Hq, batch * seq) and cuDNN's packed [batch, Hq, seq]: one
// strided copy per row of the batch, on the stream.
void copy_statistics(const float* from, float* to, const cudnn::AttentionShape& s, bool to_cudnn,
                     cudaStream_t stream) {
  const size_t row = sizeof(float) * static_cast<size_t>(s.seq);
  const size_t lse_pitch = row * static_cast<size_t>(s.batch);
  for (int64_t b = 0; b < s.batch; ++b) {
    const size_t lse_offset = static_cast<size_t>(b * s.seq),
                 packed_offset = static_cast<size_t>(b * s.q_heads * s.seq);
    cudaError_t e = to_cudnn
                        ? cudaMemcpy2DAsync(to + packed_offset, row, from + lse_offset, lse_pitch, row,
                                            static_cast<size_t>(s.q_heads), cudaMemcpyDeviceToDevice, stream)
                        : cudaMemcpy2DAsync(to + lse_offset, lse_pitch, from + packed_offset, row, row,
                                            static_cast<size_t>(s.q_heads), cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess)
      throw Error(fmt::format("attention: copying the statistics failed: {}", cudaGetErrorString(e)));
  }
}

// The graphs declare every tensor 16-byte aligned (as cuDNN's frontend does).
bool aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// The tensors both directions read: q k v out, the statistics at `stats`, the scale.
cudnn::AttentionTensors forward_tensors(const FlashAttentionParams& p, float* stats) {
  cudnn::AttentionTensors t;
  t.q = const_cast<void*>(p.q);
  t.k = const_cast<void*>(p.k);
  t.v = const_cast<void*>(p.v);
  t.out = p.out;
  t.stats = stats;
  t.scale = p.scale;
  return t;
}

// The backward's tensors: the forward's, and dout, dq, dk and dv.
cudnn::AttentionTensors backward_tensors(const FlashAttentionBackwardParams& p, float* stats) {
  cudnn::AttentionTensors t = forward_tensors(p.fwd, stats);
  t.dout = const_cast<void*>(p.dout);
  t.dq = p.dq;
  t.dk = p.dk;
  t.dv = p.dv;
  return t;
}

}  // namespace

CudnnAttention::Graphs* CudnnAttention::graphs(const FlashAttentionParams& p, int64_t row_tokens) {
  if (row_tokens <= 0 || p.tokens % row_tokens != 0) {
    refusal_ = fmt::format("{} tokens are not whole rows of {}", p.tokens, row_tokens);
    return nullptr;
  }
  // cuDNN before 9.16 masks sequences of other lengths only with a padding mask, which ferry builds
  // for segments alone.
  if (cudnn::library()->version < 91600 && row_tokens % 128 != 0) {
    refusal_ = fmt::format("rows of {} tokens: cuDNN {} needs a multiple of 128", row_tokens,
                           cudnn::library()->version);
    return nullptr;
  }
  const cudnn::AttentionShape shape{p.tokens / row_tokens,
                                    row_tokens,
                                    p.q_heads,
                                    p.kv_heads,
                                    p.head_dim,
                                    static_cast<int>(out_row_elements(p) / p.head_dim)};
  return built(shape);
}

namespace {

int64_t power_of_two_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The tables of a ragged batch of `batch` entries, carved from the start of `base`.
cudnn::RaggedTables carve_tables(char* base, int64_t batch) {
  cudnn::RaggedTables t;
  const int64_t offsets = cudnn::round_up_256(static_cast<int64_t>(sizeof(int64_t)) * (batch + 1));
  t.q_offset = reinterpret_cast<int64_t*>(base);
  t.kv_offset = reinterpret_cast<int64_t*>(base + offsets);
  t.o_offset = reinterpret_cast<int64_t*>(base + 2 * offsets);
  t.seq_len = reinterpret_cast<int32_t*>(base + 3 * offsets);
  return t;
}

int64_t tables_bytes(int64_t batch) {
  return 3 * cudnn::round_up_256(static_cast<int64_t>(sizeof(int64_t)) * (batch + 1)) +
         cudnn::round_up_256(static_cast<int64_t>(sizeof(int32_t)) * batch);
}

// cuDNN's grids put the batch in a dimension of at most 65535 blocks.
constexpr int64_t kMostEntries = 65535;

}  // namespace

CudnnAttention::Graphs* CudnnAttention::graphs(const FlashAttentionParams& p,
                                               const AttentionSegments& segments) {
  if (segments.count <= 0 || segments.bounds == nullptr || segments.longest <= 0) {
    refusal_ = "no segments";
    return nullptr;
  }
  const int64_t batch = power_of_two_at_least(segments.count);
  if (batch > kMostEntries) {
    refusal_ = fmt::format("{} segments: more than cuDNN's batch of {} takes", segments.count, kMostEntries);
    return nullptr;
  }
  cudnn::AttentionShape shape{batch,      power_of_two_at_least(std::max<int64_t>(segments.longest, 128)),
                              p.q_heads,  p.kv_heads,
                              p.head_dim, static_cast<int>(out_row_elements(p) / p.head_dim)};
  shape.ragged = true;
  shape.tokens = p.tokens;
  return built(shape);
}

CudnnAttention::Graphs* CudnnAttention::built(const cudnn::AttentionShape& shape) {
  const Key key{shape.batch,
                shape.seq,
                shape.q_heads,
                shape.kv_heads,
                shape.head_dim,
                shape.out_heads,
                shape.ragged ? shape.tokens : 0};
  auto it = built_.find(key);
  if (it == built_.end()) {
    std::unique_ptr<Graphs> g;
    try {
      const cudnn::Library& lib = *cudnn::library();
      auto handle = static_cast<cudnnHandle_t>(handle_);
      g = std::make_unique<Graphs>();
      g->shape = shape;
      g->tables_bytes = shape.ragged ? tables_bytes(shape.batch) : 0;
      g->statistics_bytes = shape.batch > 1 || shape.ragged ? cudnn::attention_statistics_bytes(shape) : 0;
      g->forward = cudnn::build_attention_forward(lib, handle, shape);
      g->backward = cudnn::build_attention_backward(lib, handle, shape);
      log_info(
          "attention of {} {} {} tokens, {}/{} heads of {}: cuDNN {} (forward: {}, {} B workspace; "
          "backward: {}, {} B, of which the plan's {} B)",
          shape.batch, shape.ragged ? "segments of at most" : "rows x", shape.seq, shape.q_heads,
          shape.kv_heads, shape.head_dim, lib.version, g->forward.plan.engine, g->forward_bytes(),
          g->backward.plan.engine, g->backward_bytes(), g->backward.plan.workspace_bytes);
    } catch (const cudnn::Failure& e) {
      log_warn(
          "attention of {} {} {} tokens, {}/{} heads of {}: cuDNN refused it, ferry's own kernels run it: "
          "{}",
          shape.batch, shape.ragged ? "segments of at most" : "rows x", shape.seq, shape.q_heads,
          shape.kv_heads, shape.head_dim, e.what());
      g.reset();
      refusal_ = e.what();
    }
    it = built_.emplace(key, std::move(g)).first;
  }
  if (it->second == nullptr || it->second->failed) {
    if (refusal_.empty()) refusal_ = "cuDNN refused this shape (logged when first seen)";
    return nullptr;
  }
  return it->second.get();
}

bool CudnnAttention::execute(Graphs& g, const cudnn::AttentionGraph& graph, const cudnn::AttentionTensors& t,
                             void* workspace) {
  try {
    cudnn::run_attention(*cudnn::library(), static_cast<cudnnHandle_t>(handle_), graph, t, workspace);
    return true;
  } catch (const cudnn::Failure& e) {
    // Nothing was enqueued: the caller's own kernels run this call and every later one.
    g.failed = true;
    refusal_ = e.what();
    log_warn(
        "attention of {} x {} tokens: cuDNN failed to run it, ferry's own kernels run it from now on: {}",
        g.shape.batch, g.shape.seq, e.what());
    return false;
  }
}

bool CudnnAttention::can_run(Graphs* g, bool backward, size_t given,
                             std::initializer_list<const void*> tensors) {
  if (g == nullptr) return false;
  const int64_t need = backward ? g->backward_bytes() : g->forward_bytes();
  if (static_cast<size_t>(need) > given) {
    refusal_ = fmt::format("the {} needs {} bytes of workspace, {} given", backward ? "backward" : "forward",
                           need, given);
    if (!g->told_short_workspace) {
      g->told_short_workspace = true;
      log_warn(
          "attention of {} x {} tokens: ferry's own kernels run it, cuDNN's plan needs more working memory "
          "({})",
          g->shape.batch, g->shape.seq, refusal_);
    }
    return false;
  }
  if (!aligned(tensors)) {
    refusal_ = "a tensor is not 16-byte aligned";
    return false;
  }
  return true;
}

bool CudnnAttention::forward(const FlashAttentionParams& p, int64_t row_tokens, void* workspace,
                             size_t workspace_bytes) {
  refusal_.clear();
  Graphs* g = graphs(p, row_tokens);
  if (!can_run(g, false, workspace_bytes, {p.q, p.k, p.v, p.out, p.lse, workspace})) return false;
  auto stream = static_cast<cudaStream_t>(stream_);
  char* base = static_cast<char*>(workspace);
  const cudnn::AttentionTensors t =
      forward_tensors(p, g->statistics_bytes > 0 ? reinterpret_cast<float*>(base) : p.lse);
  if (!execute(*g, g->forward, t, base + g->statistics_bytes)) return false;
  if (g->statistics_bytes > 0) copy_statistics(t.stats, p.lse, g->shape, false, stream);
  return true;
}

bool CudnnAttention::forward(const FlashAttentionParams& p, const AttentionSegments& segments,
                             void* workspace, size_t workspace_bytes) {
  refusal_.clear();
  Graphs* g = graphs(p, segments);
  if (!can_run(g, false, workspace_bytes, {p.q, p.k, p.v, p.out, p.lse, workspace})) return false;
  char* base = static_cast<char*>(workspace);
  cudnn::AttentionTensors t = forward_tensors(p, reinterpret_cast<float*>(base + g->tables_bytes));
  t.ragged = ragged_tables(*g, p, segments, base);
  if (!execute(*g, g->forward, t, base + g->ahead_bytes())) return false;
  copy_ragged_statistics(segments.bounds, segments.count, p.q_heads, p.tokens, g->shape.seq, p.lse, t.stats,
                         false, stream_);
  return true;
}

bool CudnnAttention::backward(const FlashAttentionBackwardParams& p, int64_t row_tokens) {
  refusal_.clear();
  Graphs* g = graphs(p.fwd, row_tokens);
  if (!can_run(g, true, p.workspace_bytes,
               {p.fwd.q, p.fwd.k, p.fwd.v, p.fwd.out, p.fwd.lse, p.dout, p.dq, p.dk, p.dv, p.workspace}))
    return false;
  auto stream = static_cast<cudaStream_t>(stream_);
  char* base = static_cast<char*>(p.workspace);
  cudnn::AttentionTensors t =
      backward_tensors(p, g->statistics_bytes > 0 ? reinterpret_cast<float*>(base) : p.fwd.lse);
  if (g->statistics_bytes > 0) copy_statistics(p.fwd.lse, t.stats, g->shape, true, stream);
  return execute(*g, g->backward, t, base + g->statistics_bytes);
}

bool CudnnAttention::backward(const FlashAttentionBackwardParams& p, const AttentionSegments& segments) {
  refusal_.clear();
  Graphs* g = graphs(p.fwd, segments);
  if (!can_run(g, true, p.workspace_bytes,
               {p.fwd.q, p.fwd.k, p.fwd.v, p.fwd.out, p.fwd.lse, p.dout, p.dq, p.dk, p.dv, p.workspace}))
    return false;
  char* base = static_cast<char*>(p.workspace);
  cudnn::AttentionTensors t = backward_tensors(p, reinterpret_cast<float*>(base + g->tables_bytes));
  t.ragged = ragged_tables(*g, p.fwd, segments, base);
  copy_ragged_statistics(segments.bounds, segments.count, p.fwd.q_heads, p.fwd.tokens, g->shape.seq,
                         p.fwd.lse, t.stats, true, stream_);
  return execute(*g, g->backward, t, base + g->ahead_bytes());
}

size_t CudnnAttention::backward_workspace_bytes(const FlashAttentionParams& p,
                                                const AttentionSegments& segments) {
  const Graphs* g = graphs(p, segments);
  return g == nullptr ? 0 : static_cast<size_t>(g->backward_bytes());
}

cudnn::RaggedTables CudnnAttention::ragged_tables(const Graphs& g, const FlashAttentionParams& p,
                                                  const AttentionSegments& segments, char* base) {
  const cudnn::RaggedTables t = carve_tables(base, g.shape.batch);
  const int64_t D = p.head_dim;
  fill_ragged_attention_tables(segments.bounds, segments.count, g.shape.batch, p.q_heads * D, p.kv_heads * D,
                               out_row_elements(p), t.seq_len, t.q_offset, t.kv_offset, t.o_offset, stream_);
  return t;
}

}  // namespace ferry
