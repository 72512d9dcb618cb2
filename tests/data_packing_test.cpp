// Packing documents into fixed-length rows: shifted targets, positions, document starts, splits, padding.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "data/packing.h"
#include "test_util.h"

namespace ferry {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t X = kIgnoreIndex;

Document doc(Ids ids, Ids labels = {}) {
  Document d;
  d.input_ids = std::move(ids);
  d.labels = labels.empty() ? d.input_ids : std::move(labels);
  return d;
}

TEST(Packing, TargetsShiftWithinDocumentsAndStopAtBoundaries) {
  PackStats stats;
  const auto rows = pack_documents({doc({1, 2, 3}), doc({4, 5}, {X, 5})}, 8, true, &stats);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].input_ids, (Ids{1, 2, 3, 4, 5, 0, 0, 0}));
  // 3 is the last token of its document: it predicts nothing (not 4).
  EXPECT_EQ(rows[0].targets, (Ids{2, 3, X, 5, X, X, X, X}));
  EXPECT_EQ(rows[0].positions, (Ids{0, 1, 2, 0, 1, 0, 0, 0}));
  // Pads are documents of one token each.
  EXPECT_EQ(rows[0].doc_start, (Ids{0, 0, 0, 3, 3, 5, 6, 7}));
  EXPECT_EQ(stats.rows, 1);
  EXPECT_EQ(stats.documents, 2);
  EXPECT_EQ(stats.pad_tokens, 3);
  EXPECT_EQ(stats.target_tokens, 3);
  EXPECT_EQ(stats.split_documents, 0);
}

TEST(Packing, MaskedLabelsStayMaskedAfterTheShift) {
  // A prompt (masked) then a completion: the prompt's last token predicts the first completion token.
  const auto rows = pack_documents({doc({7, 8, 9, 10}, {X, X, 9, 10})}, 4, true);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].targets, (Ids{X, 9, 10, X}));
}

TEST(Packing, LongDocumentsAreSplitAcrossRowsAndRestartPositions) {
  PackStats stats;
  const auto rows = pack_documents({doc({10, 11, 12, 13, 14}), doc({20, 21, 22, 23})}, 4, true, &stats);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].input_ids, (Ids{10, 11, 12, 13}));
  EXPECT_EQ(rows[0].targets, (Ids{11, 12, 13, X}));  // 13 → 14 is lost at the split
  EXPECT_EQ(rows[0].positions, (Ids{0, 1, 2, 3}));
  EXPECT_EQ(rows[0].doc_start, (Ids{0, 0, 0, 0}));

  // The continuation of the first document is a document of its own, then the second one starts.
  EXPECT_EQ(rows[1].input_ids, (Ids{14, 20, 21, 22}));
  EXPECT_EQ(rows[1].targets, (Ids{X, 21, 22, X}));
  EXPECT_EQ(rows[1].positions, (Ids{0, 0, 1, 2}));
  EXPECT_EQ(rows[1].doc_start, (Ids{0, 1, 1, 1}));

  EXPECT_EQ(rows[2].input_ids, (Ids{23, 0, 0, 0}));
  EXPECT_EQ(rows[2].targets, (Ids{X, X, X, X}));
  EXPECT_EQ(rows[2].positions, (Ids{0, 0, 0, 0}));
  EXPECT_EQ(rows[2].doc_start, (Ids{0, 1, 2, 3}));

  EXPECT_EQ(stats.split_documents, 2);
  EXPECT_EQ(stats.pad_tokens, 3);
  EXPECT_EQ(stats.target_tokens, 5);
}

TEST(Packing, ADocumentSpanningSeveralRows) {
  Ids ids(10);
  std::iota(ids.begin(), ids.end(), 100);
  const auto rows = pack_documents({doc(ids)}, 3, true);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].input_ids, (Ids{103, 104, 105}));
  EXPECT_EQ(rows[1].targets, (Ids{104, 105, X}));
  EXPECT_EQ(rows[1].positions, (Ids{0, 1, 2}));
  EXPECT_EQ(rows[3].input_ids, (Ids{109, 0, 0}));
  EXPECT_EQ(rows[3].doc_start, (Ids{0, 1, 2}));
}

TEST(Packing, ExactFitStartsTheNextDocumentInANewRow) {
  const auto rows = pack_documents({doc({1, 2}), doc({3, 4}), doc({5})}, 2, true);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].input_ids, (Ids{3, 4}));
  EXPECT_EQ(rows[1].targets, (Ids{4, X}));
  EXPECT_EQ(rows[2].input_ids, (Ids{5, 0}));
}

TEST(Packing, WithoutPackingOneDocumentPerRowTruncatedAndPadded) {
  PackStats stats;
  const auto rows = pack_documents({doc({1, 2, 3, 4, 5, 6}), doc({7, 8}, {X, 8})}, 4, false, &stats);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input_ids, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(rows[0].targets, (Ids{2, 3, 4, X}));  // truncated: 4 predicts nothing
  EXPECT_EQ(rows[0].positions, (Ids{0, 1, 2, 3}));
  EXPECT_EQ(rows[0].doc_start, (Ids{0, 0, 0, 0}));
  EXPECT_EQ(rows[1].input_ids, (Ids{7, 8, 0, 0}));
  EXPECT_EQ(rows[1].targets, (Ids{8, X, X, X}));
  EXPECT_EQ(rows[1].positions, (Ids{0, 1, 0, 0}));
  EXPECT_EQ(rows[1].doc_start, (Ids{0, 0, 2, 3}));
  EXPECT_EQ(stats.truncated_documents, 1);
  EXPECT_EQ(stats.dropped_tokens, 2);
  EXPECT_EQ(stats.pad_tokens, 2);
  EXPECT_EQ(stats.target_tokens, 4);
}

TEST(Packing, EmptyDocumentsAreIgnoredAndSeqLenIsChecked) {
  PackStats stats;
  const auto rows = pack_documents({doc({}), doc({1})}, 2, true, &stats);
  EXPECT_EQ(rows.size(), 1u);
  EXPECT_EQ(stats.empty_documents, 1);
  EXPECT_TRUE(pack_documents({}, 4, true).empty());
  try {
    pack_documents({doc({1})}, 0, true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[data] seq_len is 0; it must be at least 1");
  }
}

// Invariants over random documents, both modes: rows are seq_len long, positions count from each
// document's start, targets are the next label of the same document, and packing keeps every token.
// A row attends as one causal sequence when every token after its first document reaches
// nothing: one-token documents without a target (padding, a last one-token document).
TEST(Packing, RowsThatAttendAsOneSequence) {
  // One document, then padding.
  auto rows = pack_documents({doc({1, 2, 3}), doc({4, 5, 6, 7, 8, 9})}, 5, false);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(attends_as_one_sequence(rows[0]));
  // Truncated: one document filling the row.
  EXPECT_TRUE(attends_as_one_sequence(rows[1]));
  // Two documents in a row: the second attends only to itself.
  rows = pack_documents({doc({1, 2, 3}), doc({4, 5})}, 8, true);
  EXPECT_FALSE(attends_as_one_sequence(rows[0]));
  // A last document of one token predicts nothing and is seen by nothing else.
  rows = pack_documents({doc({1, 2, 3}), doc({4})}, 6, true);
  ASSERT_EQ(rows[0].doc_start, (Ids{0, 0, 0, 3, 4, 5}));
  EXPECT_TRUE(attends_as_one_sequence(rows[0]));
  // ... but a one-token document with a target (made by hand) reaches the loss.
  PackedRow r = rows[0];
  r.targets[3] = 7;
  EXPECT_FALSE(attends_as_one_sequence(r));
  // A split document's continuation starts its row: one sequence too.
  rows = pack_documents({doc({1, 2, 3, 4, 5, 6, 7})}, 4, true);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(attends_as_one_sequence(rows[1]));
}

// Segments for attention: each document starts one; a one-token document without a target joins
// the segment before it (or starts the row's first).
TEST(Packing, AttentionSegmentsStartAtDocumentsThatReachSomething) {
  // Two documents, then padding that joins the second.
  auto rows = pack_documents({doc({1, 2, 3}), doc({4, 5})}, 8, true);
  ASSERT_EQ(rows[0].doc_start, (Ids{0, 0, 0, 3, 3, 5, 6, 7}));
  EXPECT_EQ(attention_segments(rows[0]), (Ids{0, 3}));
  // A one-token document in the middle joins the one before it.
  rows = pack_documents({doc({1, 2}), doc({3}), doc({4, 5, 6})}, 8, true);
  ASSERT_EQ(rows[0].doc_start, (Ids{0, 0, 2, 3, 3, 3, 6, 7}));
  EXPECT_EQ(attention_segments(rows[0]), (Ids{0, 3}));
  // ... unless it has a target (made by hand): it reaches the loss, so it is a segment.
  PackedRow r = rows[0];
  r.targets[2] = 9;
  EXPECT_EQ(attention_segments(r), (Ids{0, 2, 3}));
  // Split rows: a one-token first part of a split document predicts nothing in its row; the
  // continuation starts the next row.
  rows = pack_documents({doc({1, 2, 3}), doc({4, 5, 6, 7, 8}), doc({9, 10}), doc({11, 12})}, 4, true);
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_EQ(rows[0].doc_start, (Ids{0, 0, 0, 3}));
  EXPECT_EQ(attention_segments(rows[0]), (Ids{0}));
  EXPECT_EQ(attention_segments(rows[1]), (Ids{0}));
  ASSERT_EQ(rows[2].doc_start, (Ids{0, 0, 2, 2}));
  EXPECT_EQ(attention_segments(rows[2]), (Ids{0, 2}));
  // Best fit, padded: rows {5, 3} and {4, 3, 1}, whose last one-token document joins the 3.
  rows = pack_documents(
      {doc({1, 1, 1}), doc({2, 2, 2, 2, 2}), doc({3}), doc({4, 4, 4, 4}), doc({5, 5, 5}, {X, X, 5})}, 8,
      PackingMode::BestFit);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(attention_segments(rows[0]), (Ids{0, 5}));
  ASSERT_EQ(rows[1].doc_start, (Ids{0, 0, 0, 0, 4, 4, 4, 7}));
  EXPECT_EQ(attention_segments(rows[1]), (Ids{0, 4}));
  rows = pack_documents({doc({1, 2}), doc({3, 4, 5})}, 8, PackingMode::BestFit);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(attention_segments(rows[0]), (Ids{0, 3}));
  // A row of padding is one segment; so are tokens that reach nothing at a row's start, which
  // the next document then follows.
  EXPECT_EQ(attention_segments(padding_row(5)), (Ids{0}));
  r = PackedRow{Ids{0, 0, 7, 8, 9}, Ids{X, X, 8, 9, X}, Ids{0, 0, 0, 1, 2}, Ids{0, 1, 2, 2, 2}};
  EXPECT_EQ(attention_segments(r), (Ids{0, 2}));
  EXPECT_EQ(attention_segments(PackedRow{Ids{1}, Ids{X}, Ids{0}, Ids{0}}), (Ids{0}));
  // Rows that attend as one sequence are one segment.
  rows = pack_documents({doc({1, 2, 3}), doc({4, 5, 6, 7, 8, 9}), doc({1})}, 5, false);
  for (const PackedRow& row : rows) {
    ASSERT_TRUE(attends_as_one_sequence(row));
    EXPECT_EQ(attention_segments(row), (Ids{0}));
  }
}

// What AttentionMask::segment_bounds promises of attention_segments' cut (ops/ops.h): each segment
// starts a document, and its other tokens are that document's or reach nothing.
void expect_segments_keep_documents(const PackedRow& row) {
  const Ids starts = attention_segments(row);
  ASSERT_FALSE(starts.empty());
  EXPECT_EQ(starts[0], 0);
  if (attends_as_one_sequence(row)) {
    EXPECT_EQ(starts, (Ids{0}));
  }
  const auto n = static_cast<int32_t>(row.doc_start.size());
  for (size_t i = 0; i < starts.size(); ++i) {
    const int32_t begin = starts[i], end = i + 1 < starts.size() ? starts[i + 1] : n;
    ASSERT_LT(begin, end);
    ASSERT_EQ(row.doc_start[begin], begin);
    for (int32_t t = begin + 1; t < end; ++t) {
      if (row.doc_start[t] == begin) continue;
      const bool alone = row.doc_start[t] == t && (t + 1 == n || row.doc_start[t + 1] != t);
      EXPECT_TRUE(alone && row.targets[t] == X) << "token " << t << " in the segment at " << begin;
    }
  }
}

TEST(Packing, InvariantsOnRandomDocuments) {
  std::mt19937_64 rng(3);
  std::vector<Document> docs;
  Ids all_ids;
  for (int d = 0; d < 200; ++d) {
    const int len = 1 + static_cast<int>(rng() % 40);
    Document x;
    for (int i = 0; i < len; ++i) {
      x.input_ids.push_back(1 + static_cast<int32_t>(rng() % 1000));
      x.labels.push_back(rng() % 5 == 0 ? X : x.input_ids.back());
    }
    all_ids.insert(all_ids.end(), x.input_ids.begin(), x.input_ids.end());
    docs.push_back(std::move(x));
  }
  for (bool packing : {true, false}) {
    for (int64_t seq_len : {1, 7, 31, 64}) {
      SCOPED_TRACE(::testing::Message() << "packing=" << packing << " seq_len=" << seq_len);
      PackStats stats;
      const auto rows = pack_documents(docs, seq_len, packing, &stats);
      Ids kept;
      int64_t targets = 0;
      for (const auto& row : rows) {
        ASSERT_EQ(row.input_ids.size(), size_t(seq_len));
        ASSERT_EQ(row.targets.size(), size_t(seq_len));
        ASSERT_EQ(row.positions.size(), size_t(seq_len));
        ASSERT_EQ(row.doc_start.size(), size_t(seq_len));
        for (int64_t t = 0; t < seq_len; ++t) {
          ASSERT_LE(row.doc_start[t], t);
          ASSERT_EQ(row.positions[t], t - row.doc_start[t]);
          if (row.targets[t] != X) {
            ++targets;
            // A real target has a next token in the same document.
            ASSERT_LT(t + 1, seq_len);
            ASSERT_EQ(row.doc_start[t + 1], row.doc_start[t]);
          }
        }
        expect_segments_keep_documents(row);
        for (int64_t t = 0; t < seq_len; ++t)
          if (!(row.input_ids[t] == 0 && row.doc_start[t] == t && row.targets[t] == X))
            kept.push_back(row.input_ids[t]);
      }
      EXPECT_EQ(targets, stats.target_tokens);
      if (packing) {
        EXPECT_EQ(kept, all_ids);  // nothing lost, order kept
        EXPECT_EQ(int64_t(rows.size()), (int64_t(all_ids.size()) + seq_len - 1) / seq_len);
      } else {
        EXPECT_EQ(rows.size(), docs.size());
        Ids truncated;
        for (const auto& d : docs)
          truncated.insert(truncated.end(), d.input_ids.begin(),
                           d.input_ids.begin() + std::min<int64_t>(seq_len, d.input_ids.size()));
        EXPECT_EQ(kept, truncated);
      }
    }
  }
}

// Best fit: longest first, each into the tightest row. Lengths 5, 4, 3, 3, 1 in rows of 8: 5+3,
// 4+3+1 -- two full rows, where split packing would cut the 4 and the second 3.
TEST(BestFitPacking, NeverSplitsAndFillsTightly) {
  const std::vector<Document> docs = {doc({1, 1, 1}), doc({2, 2, 2, 2, 2}), doc({3}), doc({4, 4, 4, 4}),
                                      doc({5, 5, 5}, {X, X, 5})};
  PackStats stats;
  const auto rows = pack_documents(docs, 8, PackingMode::BestFit, &stats);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input_ids, (Ids{2, 2, 2, 2, 2, 1, 1, 1}));
  EXPECT_EQ(rows[1].input_ids, (Ids{4, 4, 4, 4, 5, 5, 5, 3}));
  EXPECT_EQ(rows[1].positions, (Ids{0, 1, 2, 3, 0, 1, 2, 0}));
  EXPECT_EQ(rows[1].doc_start, (Ids{0, 0, 0, 0, 4, 4, 4, 7}));
  // Each document's own labels, shifted; its last token predicts nothing.
  EXPECT_EQ(rows[1].targets, (Ids{4, 4, 4, X, X, 5, X, X}));
  EXPECT_EQ(stats.split_documents, 0);
  EXPECT_EQ(stats.pad_tokens, 0);
  EXPECT_EQ(stats.documents, 5);
  EXPECT_EQ(stats.target_tokens, 4 + 2 + 3 + 1);
}

TEST(BestFitPacking, TruncatesOnlyWhatCannotFitAnyRowAndCountsIt) {
  PackStats stats;
  const auto rows =
      pack_documents({doc({1, 2, 3, 4, 5, 6}), doc({}), doc({7, 8})}, 4, PackingMode::BestFit, &stats);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input_ids, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(rows[1].input_ids, (Ids{7, 8, kPadTokenId, kPadTokenId}));
  EXPECT_EQ(stats.truncated_documents, 1);
  EXPECT_EQ(stats.dropped_tokens, 2);
  EXPECT_EQ(stats.empty_documents, 1);
  EXPECT_EQ(stats.pad_tokens, 2);
}

// Every document lands whole in one row (as one contiguous document of it), whatever the lengths.
TEST(BestFitPacking, EveryDocumentWholeOnRandomLengths) {
  std::mt19937_64 rng(11);
  std::vector<Document> docs;
  int32_t next = 1;
  for (int d = 0; d < 300; ++d) {
    Ids ids(1 + rng() % 60);
    for (auto& id : ids) id = next++;
    docs.push_back(doc(ids));
  }
  PackStats stats;
  const auto rows = pack_documents(docs, 64, PackingMode::BestFit, &stats);
  int64_t tokens = 0;
  for (const auto& d : docs) tokens += static_cast<int64_t>(d.input_ids.size());
  std::vector<int> seen(static_cast<size_t>(next), 0);
  for (const auto& row : rows) expect_segments_keep_documents(row);
  for (const auto& row : rows)
    for (size_t t = 0; t < row.input_ids.size(); ++t) {
      if (row.input_ids[t] == kPadTokenId) continue;
      ++seen[static_cast<size_t>(row.input_ids[t])];
      // Ids rise by one within a document, so a whole document is a run that starts at doc_start.
      EXPECT_EQ(row.input_ids[t] - row.input_ids[static_cast<size_t>(row.doc_start[t])], row.positions[t]);
    }
  for (int32_t id = 1; id < next; ++id) ASSERT_EQ(seen[static_cast<size_t>(id)], 1) << id;
  for (const auto& d : docs) {
    // The first token of each document starts a document in some row.
    bool starts = false;
    for (const auto& row : rows)
      for (size_t t = 0; t < row.input_ids.size(); ++t)
        starts |= row.input_ids[t] == d.input_ids[0] && row.positions[t] == 0;
    EXPECT_TRUE(starts);
  }
  EXPECT_EQ(stats.split_documents, 0);
  // Best fit on these lengths wastes little: within 5% of the bound ceil(tokens / 64).
  EXPECT_LE(static_cast<double>(rows.size()), 1.05 * static_cast<double>((tokens + 63) / 64) + 1);
}

}  // namespace
}  // namespace ferry
