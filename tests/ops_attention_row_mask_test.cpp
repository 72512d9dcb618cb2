// AttentionMask::row_tokens (ops/ops.h): rows that data/packing.h's attends_as_one_sequence accepts
// may be attended as plain causal sequences; and AttentionMask::segment_bounds: the segments of
// data/packing.h's attention_segments may each be attended as one. On the reference attention,
// either mask gives the exact mask's outputs at every token that reaches the loss, and the exact
// gradients when dout is zero at the tokens that do not (as the loss makes it) -- bit for bit,
// since the extra keys only add exact zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "counting_document.h"
#include "data/packing.h"
#include "ops/ops.h"
#include "test_util.h"

namespace ferry {
namespace {

Document doc(int n, int first_id) {
  return test::counting_document(n, first_id);
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

// Attention of T tokens of Hq/Hkv heads of D under `doc_start`, forward and backward, on the
// reference ops, with the same random inputs every call; dout zero at the tokens that do not reach.
Result reference_attention(const std::vector<int32_t>& doc_start, const std::vector<bool>& reaches,
                           int64_t Hq, int64_t Hkv, int64_t D) {
  const int64_t T = static_cast<int64_t>(doc_start.size());
  const size_t nq = static_cast<size_t>(T * Hq * D), nk = static_cast<size_t>(T * Hkv * D);
  std::vector<float> q = test::random_vector(nq, 1), k = test::random_vector(nk, 2),
                     v = test::random_vector(nk, 3), dout = test::random_vector(nq, 4);
  for (int64_t t = 0; t < T; ++t)
    if (!reaches[static_cast<size_t>(t)])
      for (int64_t i = 0; i < Hq * D; ++i) dout[static_cast<size_t>(t * Hq * D + i)] = 0.0f;
  auto ops = make_cpu_ops();
  Result r{std::vector<float>(nq), std::vector<float>(static_cast<size_t>(Hq * T)), std::vector<float>(nq),
           std::vector<float>(nk), std::vector<float>(nk)};
  const Tensor tq = Tensor::f32(q.data(), {T, Hq, D}), tk = Tensor::f32(k.data(), {T, Hkv, D}),
               tv = Tensor::f32(v.data(), {T, Hkv, D}), tout = Tensor::f32(r.out.data(), {T, Hq, D}),
               tlse = Tensor::f32(r.lse.data(), {Hq, T});
  ops->attention_forward(tq, tk, tv, doc_start.data(), 0.35f, tout, tlse);
  ops->attention_backward(tq, tk, tv, doc_start.data(), 0.35f, tout, tlse,
                          Tensor::f32(dout.data(), {T, Hq, D}), Tensor::f32(r.dq.data(), {T, Hq, D}),
                          Tensor::f32(r.dk.data(), {T, Hkv, D}), Tensor::f32(r.dv.data(), {T, Hkv, D}));
  return r;
}

// Expects a and b the same bits at every output of a token that reaches, and every gradient;
// returns how many outputs of tokens that do not reach differ.
int64_t expect_equal_where_it_matters(const Result& a, const Result& b, const std::vector<bool>& reaches,
                                      int64_t row) {
  int64_t differing_unread = 0;
  for (size_t t = 0; t < reaches.size(); ++t) {
    for (int64_t i = 0; i < row; ++i) {
      const size_t e = t * static_cast<size_t>(row) + static_cast<size_t>(i);
      if (reaches[t]) {
        EXPECT_EQ(a.out[e], b.out[e]) << "out at token " << t;
      } else {
        differing_unread += a.out[e] != b.out[e];
      }
      EXPECT_EQ(a.dq[e], b.dq[e]) << "dq at token " << t;
    }
  }
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  return differing_unread;
}

TEST(AttentionSegmentMask, SegmentCausalMatchesTheExactMaskWhereItMatters) {
  constexpr int64_t R = 40, Hq = 4, Hkv = 2, D = 8;
  // Best-fit rows: several documents to a row, one-token documents (which predict nothing), padding.
  const std::vector<PackedRow> rows = pack_documents(
      {doc(9, 1), doc(1, 20), doc(12, 30), doc(1, 50), doc(7, 60), doc(25, 70), doc(3, 100), doc(1, 110)}, R,
      PackingMode::BestFit);
  std::vector<int32_t> exact, segment_causal;
  std::vector<bool> reaches;
  int64_t segments = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const PackedRow& row = rows[r];
    std::vector<int32_t> starts = attention_segments(row);
    ASSERT_FALSE(starts.empty());
    ASSERT_EQ(starts[0], 0);
    segments += static_cast<int64_t>(starts.size());
    size_t seg = 0;
    for (int64_t t = 0; t < R; ++t) {
      while (seg + 1 < starts.size() && starts[seg + 1] <= t) ++seg;
      const int32_t base = static_cast<int32_t>(static_cast<int64_t>(r) * R);
      exact.push_back(base + row.doc_start[t]);
      segment_causal.push_back(base + starts[seg]);
      // A document of one token without a target reaches nothing: nothing attends to it, and it
      // predicts nothing.
      const bool alone = row.doc_start[t] == t && (t + 1 == R || row.doc_start[t + 1] != t);
      reaches.push_back(!(alone && row.targets[t] == kIgnoreIndex));
    }
  }
  // More segments than rows (several documents a row), fewer than documents and pads.
  EXPECT_GT(segments, static_cast<int64_t>(rows.size()));
  const Result a = reference_attention(exact, reaches, Hq, Hkv, D);
  const Result b = reference_attention(segment_causal, reaches, Hq, Hkv, D);
  expect_equal_where_it_matters(a, b, reaches, Hq * D);
}

TEST(AttentionRowMask, RowCausalMatchesTheExactMaskWhereItMatters) {
  constexpr int64_t R = 24, Hq = 4, Hkv = 2, D = 8;
  // Row 0: a document of 15 tokens, then padding; row 1: a document filling the row; row 2: a
  // document of 20 tokens and a last document of one token, then padding.
  std::vector<PackedRow> rows = pack_documents({doc(15, 1)}, R, false);
  const std::vector<PackedRow> full = pack_documents({doc(30, 1)}, R, false);
  rows.push_back(full[0]);
  rows.push_back(pack_documents({doc(20, 1), doc(1, 50)}, R, true)[0]);
  std::vector<int32_t> exact, row_causal;
  std::vector<bool> reaches;  // the token's output matters: it belongs to its row's first document
  for (size_t r = 0; r < rows.size(); ++r) {
    ASSERT_TRUE(attends_as_one_sequence(rows[r])) << "row " << r;
    for (int64_t t = 0; t < R; ++t) {
      exact.push_back(static_cast<int32_t>(r * R) + rows[r].doc_start[t]);
      row_causal.push_back(static_cast<int32_t>(r * R));
      reaches.push_back(rows[r].doc_start[t] == 0);
    }
  }
  const Result a = reference_attention(exact, reaches, Hq, Hkv, D);
  const Result b = reference_attention(row_causal, reaches, Hq, Hkv, D);
  // The masks do differ: the padding's own outputs are not the same (and read by nothing).
  EXPECT_GT(expect_equal_where_it_matters(a, b, reaches, Hq * D), 0);
}

}  // namespace
}  // namespace ferry
