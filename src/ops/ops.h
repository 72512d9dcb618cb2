// The op interface: every computation of a training step that touches activations.
//
// One implementation per backend with the same semantics: ops/cpu (fp32 reference, the oracle)
// and ops/cuda (bf16 storage, fp32 accumulation). Conventions, shared by every backend:
//
// * Shapes use T = tokens of the micro-chunk (sequences flattened), H = hidden size, V = vocab,
//   Hq / Hkv = query / key-value heads, D = head_dim, F = intermediate size.
// * Outputs for activations are assigned (`=`); gradients of parameters are accumulated (`+=`),
//   so a unit's gradient buffer sums over micro-chunks. Optional tensors are empty views.
// * Where a layer adds an op's output to another tensor (a residual connection, or the gradient
//   of an input that feeds several ops), the op takes the addend and adds it in its own epilogue:
//   linear_forward's residual, linear_backward's accumulate_dx, rmsnorm_backward's dresidual. The
//   result equals the op's output followed by add(addend, output) -- on the CPU bit for bit, on
//   the GPU with one rounding instead of two -- without a separate pass over memory.
// * Packed sequences: `doc_start[t]` is the index (in 0..T-1) of the first token of token t's
//   document. Query t attends to keys j with doc_start[t] <= j <= t. A batch of separate
//   sequences is the special case where every sequence is one document.
// * Loss targets are already shifted: target[t] is the token that position t predicts, -100
//   (kIgnoreIndex) where nothing is predicted.
//
// The CUDA backend (ops/cuda/cuda_ops.h) adds:
// * Dtypes: activations and weights BF16 (q, k, v, hidden states, logits, w, bias, norm weights);
//   parameter gradients F32 (resident training) or BF16 (streamed units), and dw / dbias /
//   dweight / dtable accumulate (+=) into whichever of the two the given tensor has, summing in
//   fp32 and rounding once per call; statistics (rstd, lse) and the loss (loss_sum) F32. Every
//   product and reduction accumulates in fp32. add and copy take F32, BF16 and F16 (copy also F64).
// * Pointers: every tensor and every raw pointer (ids, targets, positions, doc_start, inv_freq) is
//   device memory.
// * Asynchrony: every op is issued to the ops' stream and returns at once; no op synchronizes with
//   the host, so results (the loss included) are read after the caller's own event or sync.
// * Determinism: same inputs, same bits, run to run (no floating-point atomics; reductions in a
//   fixed order), except attention_backward's dq (flash_attention.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ignore_index.h"
#include "core/tensor.h"
#include "ops/gemm_choice.h"

namespace ferry {

// Which keys each query attends, for attention_forward / attention_backward.
struct AttentionMask {
  // The document of each token (the "Packed sequences" convention above): the exact mask.
  const int32_t* doc_start = nullptr;
  // 0, or R > 0 when the caller knows on the host that the T tokens are rows of R tokens in which
  // every token belongs to the document that starts at its row's first token, except a row's
  // trailing tokens that reach nothing: documents of one token each (doc_start[t] == t) without a
  // loss target, such as padding. A backend may then attend causally within each row and ignore
  // doc_start. Outputs at those trailing tokens are then unspecified; every other output, and
  // every gradient when their dout is zero (as the loss makes it), is the exact mask's.
  int64_t row_tokens = 0;
  // 0, or n > 0 when the caller knows on the host that the T tokens fall into n segments, each a
  // causal sequence: segment i is tokens [segment_bounds[i], segment_bounds[i + 1]) (n + 1 bounds
  // in the memory the ops run on, the first 0, the last T), every token belongs to the document
  // that starts its segment, except tokens that reach nothing (documents of one token without a
  // loss target, such as padding), which may sit at the end of the segment before them. A backend
  // may then attend causally within each segment and ignore doc_start, with the same guarantee as
  // row_tokens. longest_segment is the most tokens a segment has.
  const int32_t* segment_bounds = nullptr;
  int64_t segments = 0;
  int64_t longest_segment = 0;

  AttentionMask(const int32_t* starts, int64_t rows = 0)
      : doc_start(starts), row_tokens(rows) {}  // NOLINT: implicit
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
  // How many calls of one problem the backend takes to reach its steady speed: the CUDA ops time
  // GEMM candidates on their first calls (ops/cuda/cuda_gemm.cuh). A measurement of speed (the
  // machine profile) warms up this many times first.
  virtual int calls_to_steady_speed() const { return 1; }
  // How many calls so far ran a product whose tuning was not finished (a candidate on trial, or
  // the trials' times not yet read): a measurement of speed warms up until a run adds none, which
  // at most calls_to_steady_speed() runs reach. 0 for a backend without tuning.
  virtual int64_t tuning_calls() const { return 0; }
  // What a measurement of the ops' speed depends on besides the device: the backend and any
  // library it hands ops to, and settings that change their speed ("cuda", "cuda, cuDNN 91400
  // attention", "cuda, GEMMs tuned among 24"). A machine profile records it, and a cached one
  // measured with other kernels is measured again.
  virtual std::string kernels() const { return name(); }
  // Tuned GEMM algorithms (ops/gemm_choice.h), for a backend that tunes them; nothing otherwise.
  // gemm_choice_scope(): where the choices hold (the GPU, the library's version, the tuning's
  // settings), empty when the backend makes none; gemm_choices(): those settled so far, one per
  // problem (safe to call while another thread issues ops); adopt_gemm_choices(): choices of
  // this scope made before, taken by each problem when it is first called instead of timing its
  // candidates (call before the first op).
  virtual std::string gemm_choice_scope() const { return ""; }
  virtual std::vector<GemmChoice> gemm_choices() const { return {}; }
  virtual void adopt_gemm_choices(const std::vector<GemmChoice>& /*choices*/) {}
  // Attention of whole sequences and packed documents runs on a library's fused attention where
  // the backend has one (cuDNN), else on ferry's own kernels. has_library_attention(): the backend
  // has one; use_library_attention(forward, backward): from the next call on, each direction runs
  // on the library (true, where it takes the call) or on ferry's own kernels (false). Both write
  // and read the same lse (the log-sum-exp of the scaled scores), so either direction may follow
  // the other. The machine profile times a layer each way and the run takes the faster for each
  // direction (ComputeProfile::own_attention_forward, own_attention_backward). Call while no op is
  // pending on the ops.
  virtual bool has_library_attention() const { return false; }
  virtual void use_library_attention(bool /*forward*/, bool /*backward*/) {}

  // out (T,H) = table[ids] with table (V,H).
  virtual void embedding_forward(const int32_t* ids, Tensor table, Tensor out) = 0;
  // dtable (V,H) += scatter of dout (T,H) by ids.
  virtual void embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) = 0;

  // Over the last dim D of x (R,D): out = x * rsqrt(mean(x^2) + eps) * weight; rstd (R) fp32 saved.
  virtual void rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) = 0;
  // dx (R,D) = dresidual + ... (dresidual optional; it may be dx itself), dweight (D) += ...
  virtual void rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual,
                                Tensor dx, Tensor dweight) = 0;

  // In place on x (T, heads, D), Hugging Face's rotate_half convention:
  //   x1 = x[..., :D/2], x2 = x[..., D/2:], angle = position[t] * inv_freq[i]
  //   x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin.
  // inverse = true rotates by -angle, which is the backward of the forward rotation.
  virtual void rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) = 0;

  // Causal attention with grouped query heads (Hq a multiple of Hkv) and document masking.
  // q (T,Hq,D), k v (T,Hkv,D), out (T,Ho,D), lse (Hq,T) fp32 = log-sum-exp of scaled scores.
  // Ho >= Hq: out's rows may be wider than q's, and the op writes heads 0..Hq-1 of each row and
  // leaves the others. A layer that attends one group of KV heads at a time (decoder_layer.h,
  // head_groups) passes its full (T, Hq_all, D) output seen from the group's first head, so each
  // group fills its own columns; that view's last row reaches past the buffer by the heads after
  // the group, which the op never touches. Ho == Hq is the plain contiguous case.
  virtual void attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                 Tensor lse) = 0;
  // dq dk dv assigned, same shapes as q k v; dout has out's shape (the same heads of rows as wide).
  virtual void attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                  Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) = 0;

  // Attention of the T newest tokens of one sequence over its key/value cache (generation):
  // k, v (S,Hkv,D) hold positions 0..S-1 (S >= T), q (T,Hq,D) the queries of positions S-T..S-1,
  // and query t attends keys 0..S-T+t. out (T,Hq,D). Forward only; no lse.
  virtual void attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) = 0;

  // out = silu(gate) * up, all (T,F).
  virtual void swiglu_forward(Tensor gate, Tensor up, Tensor out) = 0;
  // dgate, dup (either may be empty) assigned. out (optional) receives silu(gate) * up, bit for bit
  // as swiglu_forward writes it: a backward whose down_proj dw needs the activation gets it from
  // the same pass over gate and up, instead of a forward pass of its own before (two reads fewer).
  virtual void swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) = 0;

  // y (T,out) = residual + (x (T,in) @ w^T + bias) with w (out,in); bias (out) and residual (T,out)
  // optional. residual may be y itself; otherwise it must not overlap y.
  virtual void linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) = 0;
  // dx (T,in) = dy @ w, assigned, or added to dx (dx = dx + dy @ w) when accumulate_dx; skipped when
  // dx is empty. dw += dy^T @ x; dbias += sum_t dy (when given).
  virtual void linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                               bool accumulate_dx) = 0;

  // Cross-entropy of logits = x (T,H) @ w^T, w (V,H), against targets (T), without keeping all logits.
  // loss_sum (F32, 1 element) += the sum over tokens with target != kIgnoreIndex of
  // (logsumexp(logits_t) - logits_t[target]); accumulating on the device avoids a host sync per chunk.
  // When dx is given: dx (T,H) = grad_scale * d(sum)/dx (assigned) and dw (V,H) += grad_scale * d(sum)/dw.
  // When logits is given, it receives the full (T,V) logits (tests and evaluation only).
  // weight_grad_chunks (>= 1): a backend that makes the logits a chunk of tokens at a time may form
  // dw's product over this many chunks' dlogits at once, holding them all in its working memory
  // (cuda_ops_sizes.h: fused_cross_entropy_logits_rows): a longer product, which runs faster where
  // dw's accumulation costs more than the product. The same sums either way, in another order.
  virtual void linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                    Tensor dw, Tensor loss_sum, Tensor logits,
                                    int64_t weight_grad_chunks) = 0;

  // out = a + b (elementwise; out may alias a or b).
  virtual void add(Tensor a, Tensor b, Tensor out) = 0;
  // Sets every element to zero.
  virtual void zero(Tensor x) = 0;
  // Copies src to dst, converting between dtypes.
  virtual void copy(Tensor src, Tensor dst) = 0;
};

// The fp32 reference backend. Runs on the global thread pool.
std::unique_ptr<Ops> make_cpu_ops();

// Where a backend's working memory comes from. Given a device's allocator, the device's budget and
// peak count the ops' working memory too; left empty, the backend allocates for itself.
struct WorkspaceAllocator {
  std::function<void*(size_t bytes, const char* what)> allocate;
  std::function<void(void* pointer)> release;
  explicit operator bool() const { return static_cast<bool>(allocate) && static_cast<bool>(release); }
};

// The CUDA backend, issuing every op to `stream` (a cudaStream_t; nullptr for the legacy default
// stream) on the current device. A build without CUDA raises ferry::Error.
std::unique_ptr<Ops> make_cuda_ops(void* stream, WorkspaceAllocator allocator = {});

}  // namespace ferry
