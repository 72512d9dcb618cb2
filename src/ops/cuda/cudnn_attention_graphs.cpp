// The operation patterns are those cuDNN's own frontend builds for causal SDPA with statistics on
// cuDNN 9.x before its single-op attention took masks (9.21): the fused engines recognise the
// graph by its exact ops, so the ops that look redundant (the backward's x1.0, the FLOAT-typed K
// view) stay.
#include "ops/cuda/cudnn_attention_graphs.h"

#include <limits>
#include <memory>

#include "ops/cuda_ops_sizes.h"

namespace ferry::cudnn {

namespace {

// Unique ids of the tensors that cross the graph's boundary (the variant pack's).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kScale,       // by value
  kNegInf,      // by value
  kOne,         // by value
  kDQAccum,     // fp32 dq, in the graph's own workspace
  kSoftmaxSum,  // rowsum(dout * out), in the graph's own workspace
  kSeqLenQ,     // ragged: each entry's tokens, as queries
  kSeqLenKV,    // ragged: the same, as keys
  kQOffset,     // ragged: each entry's first element in q and dq
  kKOffset,     // ragged: in k and dk
  kVOffset,     // ragged: in v and dv
  kOOffset,     // ragged: in out and dout
  kDKFull,      // ragged GQA: dk of every query head (bf16, T rows), in the graph's own workspace
  kDVFull,      // ragged GQA: the same for dv
  kFirstVirtual = 100,
};

// Builds tensors with fresh virtual ids and keeps every descriptor alive until the plan is made.
class GraphBuilder {
 public:
  GraphBuilder(const Library& lib, const AttentionShape& s) : lib_(lib), s_(s) {
    if (!s.ragged) return;
    const std::vector<int64_t> per_entry = {s.batch, 1, 1, 1}, bounds = {s.batch + 1, 1, 1, 1};
    seq_len_q_ = &tensor(kSeqLenQ, per_entry, {1, 1, 1, 1}, CUDNN_DATA_INT32);
    seq_len_kv_ = &tensor(kSeqLenKV, per_entry, {1, 1, 1, 1}, CUDNN_DATA_INT32);
    for (const int64_t uid : {kQOffset, kKOffset, kVOffset, kOOffset})
      offsets_.push_back(&tensor(uid, bounds, {1, 1, 1, 1}, CUDNN_DATA_INT64));
  }

  const Descriptor& tensor(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides,
                           cudnnDataType_t type, bool by_value = false, const Descriptor* ragged = nullptr) {
    TensorSpec spec{uid, std::move(dims), std::move(strides), type, false, by_value};
    spec.ragged_offset = ragged;
    return keep(make_tensor(lib_, spec));
  }
  // The ragged offset of tensor `uid` (its own or, for a gradient, its input's); null unless ragged.
  const Descriptor* offset_of(int64_t uid) const {
    if (!s_.ragged) return nullptr;
    switch (uid) {
      case kQ:
      case kDQ:
      case kDQAccum:
        return offsets_[0];
      case kK:
      case kDK:
      case kDKFull:
        return offsets_[1];
      case kV:
      case kDV:
      case kDVFull:
        return offsets_[2];
      default:
        return offsets_[3];  // out, dout
    }
  }
  const Descriptor& scalar(int64_t uid) {
    return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, true);
  }
  const Descriptor& virt(std::vector<int64_t> dims, std::vector<int64_t> strides = {},
                         cudnnDataType_t type = CUDNN_DATA_FLOAT, const Descriptor* ragged = nullptr) {
    if (strides.empty()) strides = packed_strides(dims);
    TensorSpec spec{next_virtual_++, std::move(dims), std::move(strides), type, true, false};
    spec.ragged_offset = ragged;
    return keep(make_tensor(lib_, spec));
  }
  // Ferry's (batch, seq, heads, D) tensors as cuDNN's [b, h, s, d], and transposed [b, h, d, s].
  const Descriptor& bshd(int64_t uid, int64_t heads) {
    return tensor(uid, {s_.batch, heads, s_.seq, s_.head_dim}, bshd_strides(heads), CUDNN_DATA_BFLOAT16,
                  false, offset_of(uid));
  }
  // out and dout: Hq heads of rows out_heads wide.
  const Descriptor& bshd_out(int64_t uid) {
    const int64_t row = static_cast<int64_t>(s_.out_heads) * s_.head_dim;
    return tensor(uid, {s_.batch, s_.q_heads, s_.seq, s_.head_dim}, {s_.seq * row, s_.head_dim, row, 1},
                  CUDNN_DATA_BFLOAT16, false, offset_of(uid));
  }
  const Descriptor& bshd_transposed(int64_t uid, int64_t heads) {
    const std::vector<int64_t> st = bshd_strides(heads);
    return tensor(uid, {s_.batch, heads, s_.head_dim, s_.seq}, {st[0], st[1], st[3], st[2]},
                  CUDNN_DATA_BFLOAT16, false, offset_of(uid));
  }
  // What a product over a ragged entry really spans: its rows, columns and inner dimension each
  // run over the entry's queries ('q'), its keys ('k'), or neither (0: head_dim, the full extent).
  // Empty unless ragged.
  MatmulOverrides extents(char rows, char cols, char inner) const {
    MatmulOverrides o;
    if (!s_.ragged) return o;
    auto of = [&](char c) { return c == 'q' ? seq_len_q_ : c == 'k' ? seq_len_kv_ : nullptr; };
    o.m = of(rows);
    o.n = of(cols);
    o.k = of(inner);
    return o;
  }
  // y = where(row < seq_len_q and col < seq_len_kv, x, -inf): the padding mask of a ragged entry,
  // as cuDNN's frontend builds it. x itself when not ragged.
  const Descriptor& padding_mask(const Descriptor& x, const Descriptor& neg_inf) {
    if (!s_.ragged) return x;
    const Descriptor& row = virt(scores(), {}, CUDNN_DATA_INT32);
    const Descriptor& col = virt(scores(), {}, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, row, CUDNN_DATA_INT32, nullptr, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, col, CUDNN_DATA_INT32, nullptr, 3);
    const Descriptor& row_in = virt(scores(), {}, CUDNN_DATA_BOOLEAN);
    const Descriptor& col_in = virt(scores(), {}, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_LT, row, seq_len_q_, row_in, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_LT, col, seq_len_kv_, col_in, CUDNN_DATA_BOOLEAN);
    const Descriptor& keep_mask = virt(scores(), {}, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_LOGICAL_AND, row_in, &col_in, keep_mask, CUDNN_DATA_BOOLEAN);
    const Descriptor& y = virt(scores());
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, y, CUDNN_DATA_FLOAT, &keep_mask);
    return y;
  }
  std::vector<int64_t> bshd_strides(int64_t heads) const {
    return {s_.seq * heads * s_.head_dim, s_.head_dim, heads * s_.head_dim, 1};
  }
  // [b, Hq, s, s] scores, [b, Hq, s, 1] row statistics.
  std::vector<int64_t> scores() const { return {s_.batch, s_.q_heads, s_.seq, s_.seq}; }
  std::vector<int64_t> rows() const { return {s_.batch, s_.q_heads, s_.seq, 1}; }

  void op(Descriptor d) { ops_.push_back(std::make_unique<Descriptor>(std::move(d))); }
  // A new fp32 [b, Hq, s, s] scores tensor = mode(x [, b]).
  const Descriptor& scores_pointwise(cudnnPointwiseMode_t mode, const Descriptor& x,
                                     const Descriptor* b = nullptr) {
    const Descriptor& y = virt(scores());
    pointwise(mode, x, b, y);
    return y;
  }
  // scale q k^T, as [b, Hq, s, s] (kt: k seen transposed; its kv heads broadcast over the group).
  const Descriptor& scaled_scores(const Descriptor& q, const Descriptor& kt, const Descriptor& scale) {
    const Descriptor& s0 = virt(scores());
    op(make_matmul(lib_, q, kt, s0, extents('q', 'k', 0)));
    return scores_pointwise(CUDNN_POINTWISE_MUL, s0, &scale);
  }
  void pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b, const Descriptor& y,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT, const Descriptor* t = nullptr,
                 int64_t axis = -1) {
    op(make_pointwise(lib_, mode, precision, x, b, t, y, axis));
  }
  // y = where(row >= col, x, -inf) over the last two dims of x: the top-left causal mask.
  void causal_mask(const Descriptor& x, const Descriptor& neg_inf, const Descriptor& y) {
    const Descriptor& row = virt(scores(), {}, CUDNN_DATA_INT32);
    const Descriptor& col = virt(scores(), {}, CUDNN_DATA_INT32);
    const Descriptor& keep_mask = virt(scores(), {}, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, row, CUDNN_DATA_FLOAT, nullptr, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, col, CUDNN_DATA_FLOAT, nullptr, 3);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, keep_mask, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, y, CUDNN_DATA_FLOAT, &keep_mask);
  }

  // out = a @ b over [b, Hq, ...]: written to out directly when out has Hq heads, else into full
  // heads and summed over each group of query heads sharing out's kv head (GQA's dk and dv). Rows
  // are keys, the inner dimension queries. The full heads are virtual ([b, Hq, s, d] in the plan's
  // workspace), or, ragged, the graph's own tensor `full_uid` of T rows of Hq heads: a virtual one
  // would be padded to every entry's most tokens. Its ragged offset is out's, which cuDNN scales by
  // the group's size (Hq / Hkv), as its frontend declares it.
  void group_matmul(const Descriptor& a, const Descriptor& b, const Descriptor& out, int64_t full_uid) {
    const MatmulOverrides e = extents('k', 0, 'q');
    if (s_.q_heads == s_.kv_heads) {
      op(make_matmul(lib_, a, b, out, e));
      return;
    }
    const std::vector<int64_t> dims = {s_.batch, s_.q_heads, s_.seq, s_.head_dim};
    const Descriptor& full = s_.ragged ? tensor(full_uid, dims, bshd_strides(s_.q_heads), CUDNN_DATA_BFLOAT16,
                                                false, offset_of(full_uid))
                                       : virt(dims, {}, CUDNN_DATA_BFLOAT16);
    op(make_matmul(lib_, a, b, full, e));
    op(make_reduction(lib_, CUDNN_REDUCE_TENSOR_ADD, full, out));
  }

  Plan plan(cudnnHandle_t handle) {
    std::vector<const Descriptor*> raw;
    for (const auto& o : ops_) raw.push_back(o.get());
    return make_plan(lib_, handle, raw);
  }

 private:
  const Descriptor& keep(Descriptor d) {
    tensors_.push_back(std::make_unique<Descriptor>(std::move(d)));
    return *tensors_.back();
  }
  const Library& lib_;
  AttentionShape s_;
  int64_t next_virtual_ = kFirstVirtual;
  std::vector<std::unique_ptr<Descriptor>> tensors_, ops_;
  const Descriptor *seq_len_q_ = nullptr, *seq_len_kv_ = nullptr;  // ragged only
  std::vector<const Descriptor*> offsets_;                         // q, k, v, out; ragged only
};

// The ids of a ragged graph's tables (after the graph's own).
void add_ragged_uids(const AttentionShape& s, std::vector<int64_t>& uids) {
  if (s.ragged) uids.insert(uids.end(), {kSeqLenQ, kSeqLenKV, kQOffset, kKOffset, kVOffset, kOOffset});
}

}  // namespace

int64_t attention_statistics_bytes(const AttentionShape& s) {
  return static_cast<int64_t>(flash_attention_delta_bytes(s.batch * s.seq, s.q_heads));
}

AttentionGraph build_attention_forward(const Library& lib, cudnnHandle_t handle, const AttentionShape& s) {
  GraphBuilder g(lib, s);
  const int64_t Hq = s.q_heads, Hkv = s.kv_heads;
  const Descriptor& q = g.bshd(kQ, Hq);
  const Descriptor& kt = g.bshd_transposed(kK, Hkv);
  const Descriptor& v = g.bshd(kV, Hkv);
  const Descriptor& o = g.bshd_out(kO);
  const Descriptor& stats = g.tensor(kStats, g.rows(), {}, CUDNN_DATA_FLOAT);
  const Descriptor& scale = g.scalar(kScale);
  const Descriptor& neg_inf = g.scalar(kNegInf);

  const Descriptor& s1 = g.padding_mask(g.scaled_scores(q, kt, scale), neg_inf);
  const Descriptor& s2 = g.virt(g.scores());
  g.causal_mask(s1, neg_inf, s2);
  const Descriptor& mx = g.virt(g.rows());
  g.op(make_reduction(lib, CUDNN_REDUCE_TENSOR_MAX, s2, mx));
  const Descriptor& s3 = g.scores_pointwise(CUDNN_POINTWISE_SUB, s2, &mx);
  const Descriptor& e = g.scores_pointwise(CUDNN_POINTWISE_EXP, s3);
  const Descriptor& z = g.virt(g.rows());
  g.op(make_reduction(lib, CUDNN_REDUCE_TENSOR_ADD, e, z));
  const Descriptor& lz = g.virt(g.rows());
  g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, lz);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, &lz, stats);
  const Descriptor& p = g.virt(g.scores(), {}, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, e, &z, p);
  g.op(make_matmul(lib, p, v, o, g.extents('q', 0, 'k')));

  AttentionGraph graph;
  graph.plan = g.plan(handle);
  graph.uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  add_ragged_uids(s, graph.uids);
  return graph;
}

AttentionGraph build_attention_backward(const Library& lib, cudnnHandle_t handle, const AttentionShape& s) {
  GraphBuilder g(lib, s);
  const int64_t B = s.batch, S = s.seq, D = s.head_dim, Hq = s.q_heads, Hkv = s.kv_heads;
  const Descriptor& q = g.bshd(kQ, Hq);
  const Descriptor& kt = g.bshd_transposed(kK, Hkv);
  const Descriptor& vt = g.bshd_transposed(kV, Hkv);
  const Descriptor& o = g.bshd_out(kO);
  const Descriptor& dout = g.bshd_out(kDO);
  const Descriptor& stats = g.tensor(kStats, g.rows(), {}, CUDNN_DATA_FLOAT);
  const Descriptor& dq = g.bshd(kDQ, Hq);
  const Descriptor& dk = g.bshd(kDK, Hkv);
  const Descriptor& dv = g.bshd(kDV, Hkv);
  const Descriptor& scale = g.scalar(kScale);
  const Descriptor& one = g.scalar(kOne);
  const Descriptor& neg_inf = g.scalar(kNegInf);
  const Descriptor& softmax_sum = g.tensor(kSoftmaxSum, g.rows(), {}, CUDNN_DATA_FLOAT);
  // fp32 dq: [b, Hq, s, d] packed, or, ragged, dq's rows (T of them) in fp32.
  const Descriptor& dq_accum = s.ragged ? g.tensor(kDQAccum, {B, Hq, S, D}, g.bshd_strides(Hq),
                                                   CUDNN_DATA_FLOAT, false, g.offset_of(kDQAccum))
                                        : g.tensor(kDQAccum, {B, Hq, S, D}, {}, CUDNN_DATA_FLOAT);
  // The transposes of [b, Hq, s, s] scores: [b, Hq, s_kv, s_q] over the same memory.
  const std::vector<int64_t> transposed_dims = {B, Hq, S, S}, transposed_strides = {Hq * S * S, S * S, 1, S};

  // softmax_sum = rowsum(dout * out) * 1.
  const Descriptor& t0 = g.virt({B, Hq, S, D}, {Hq * S * D, S * D, Hq * D, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, &o, t0);
  const Descriptor& t1 = g.virt(g.rows());
  g.op(make_reduction(lib, CUDNN_REDUCE_TENSOR_ADD, t0, t1));
  g.pointwise(CUDNN_POINTWISE_MUL, t1, &one, softmax_sum);

  // P = exp(mask(scale q k^T - stats)).
  const Descriptor& s1 = g.padding_mask(g.scaled_scores(q, kt, scale), neg_inf);
  const Descriptor& s2 = g.scores_pointwise(CUDNN_POINTWISE_SUB, s1, &stats);
  const Descriptor& s3 = g.virt(g.scores());
  g.causal_mask(s2, neg_inf, s3);
  const Descriptor& p = g.scores_pointwise(CUDNN_POINTWISE_EXP, s3);

  // dv = P^T dout (summed over each kv head's query heads).
  const Descriptor& pt = g.virt(transposed_dims, transposed_strides, CUDNN_DATA_BFLOAT16);
  g.op(make_reshape(lib, p, pt));
  g.group_matmul(pt, dout, dv, kDVFull);

  // dS = P * (dout v^T - softmax_sum) * scale.
  const Descriptor& dp = g.virt(g.scores());
  g.op(make_matmul(lib, dout, vt, dp, g.extents('q', 'k', 0)));
  const Descriptor& u0 = g.scores_pointwise(CUDNN_POINTWISE_SUB, dp, &softmax_sum);
  const Descriptor& u1 = g.scores_pointwise(CUDNN_POINTWISE_MUL, u0, &p);
  const Descriptor& ds = g.scores_pointwise(CUDNN_POINTWISE_MUL, u1, &scale);

  // dk = dS^T q (summed over the group).
  const Descriptor& dst = g.virt(transposed_dims, transposed_strides, CUDNN_DATA_BFLOAT16);
  g.op(make_reshape(lib, ds, dst));
  g.group_matmul(dst, q, dk, kDKFull);

  // dq = dS k, accumulated in fp32, then rounded.
  const Descriptor& k_view = g.virt({B, Hkv, S, D}, g.bshd_strides(Hkv), CUDNN_DATA_FLOAT, g.offset_of(kK));
  g.op(make_reshape(lib, kt, k_view));
  g.op(make_matmul(lib, ds, k_view, dq_accum, g.extents('q', 0, 'k')));
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);

  AttentionGraph graph;
  graph.plan = g.plan(handle);
  graph.uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kOne, kNegInf, kSoftmaxSum, kDQAccum};
  add_ragged_uids(s, graph.uids);
  // dq_accum, then softmax_sum (the size of delta, of the same shape), then a ragged GQA graph's
  // full-head dk and dv, each at a 256-byte boundary.
  const int64_t rows = s.ragged ? s.tokens : B * S;
  graph.softmax_sum_offset = round_up_256(static_cast<int64_t>(sizeof(float)) * rows * Hq * D);
  graph.own_bytes = graph.softmax_sum_offset + attention_statistics_bytes(s);
  if (s.ragged && Hq != Hkv) {
    graph.uids.insert(graph.uids.end(), {kDKFull, kDVFull});
    const int64_t full = round_up_256(static_cast<int64_t>(sizeof(uint16_t)) * s.tokens * Hq * D);
    graph.dk_full_offset = graph.own_bytes;
    graph.dv_full_offset = graph.own_bytes + full;
    graph.own_bytes += 2 * full;
  }
  return graph;
}

void run_attention(const Library& lib, cudnnHandle_t handle, const AttentionGraph& graph,
                   const AttentionTensors& t, void* workspace) {
  // Host values of the by-value scalars: cuDNN reads them when the plan is launched.
  float neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f, scale = t.scale;
  char* own = static_cast<char*>(workspace) + graph.own_offset();
  std::vector<void*> pointers;
  pointers.reserve(graph.uids.size());
  for (const int64_t uid : graph.uids) {
    switch (uid) {
      case kQ:
        pointers.push_back(t.q);
        break;
      case kK:
        pointers.push_back(t.k);
        break;
      case kV:
        pointers.push_back(t.v);
        break;
      case kO:
        pointers.push_back(t.out);
        break;
      case kStats:
        pointers.push_back(t.stats);
        break;
      case kDO:
        pointers.push_back(t.dout);
        break;
      case kDQ:
        pointers.push_back(t.dq);
        break;
      case kDK:
        pointers.push_back(t.dk);
        break;
      case kDV:
        pointers.push_back(t.dv);
        break;
      case kScale:
        pointers.push_back(&scale);
        break;
      case kNegInf:
        pointers.push_back(&neg_inf);
        break;
      case kOne:
        pointers.push_back(&one);
        break;
      case kDQAccum:
        pointers.push_back(own);
        break;
      case kSoftmaxSum:
        pointers.push_back(own + graph.softmax_sum_offset);
        break;
      case kDKFull:
        pointers.push_back(own + graph.dk_full_offset);
        break;
      case kDVFull:
        pointers.push_back(own + graph.dv_full_offset);
        break;
      case kSeqLenQ:
      case kSeqLenKV:
        pointers.push_back(t.ragged.seq_len);
        break;
      case kQOffset:
        pointers.push_back(t.ragged.q_offset);
        break;
      case kKOffset:
      case kVOffset:
        pointers.push_back(t.ragged.kv_offset);
        break;
      case kOOffset:
        pointers.push_back(t.ragged.o_offset);
        break;
      default:
        throw Failure("attention graph: a tensor id without an address");
    }
  }
  execute(lib, handle, graph.plan, graph.uids, pointers, workspace);
}

}  // namespace ferry::cudnn
