// Packing: documents → rows of exactly seq_len tokens, the unit a training step consumes.
//
// Every token carries its own next-token target, its position and the start of its document, so a
// row needs no further processing: the model reads positions for RoPE, attends from token t to
// [doc_start[t], t] (causal within the document, nothing across documents), and the loss reads
// targets (already shifted; kIgnoreIndex where nothing is predicted).
//
// Split packing (packing = true, PackingMode::Split): documents are laid end to end, in order, filling each
// row completely before the next. A document longer than the space left in a row is split: the rest continues
// at the start of the next row as a new document (positions restart at 0, and it cannot attend to its first
// part), as Hugging Face packing treats it: the continuation is a sequence of its own with position_ids from
// 0. Each part's last token has target kIgnoreIndex, as when HF shifts labels within each row: the
// token after a split is not predicted by the token before it. Only the final row is padded.
//
// Best-fit packing (PackingMode::BestFit), for examples (chat, instructions): a document is never
// split. Documents are placed longest first, each into the open row whose free space fits it most
// tightly (best-fit decreasing, as TRL's default "bfd" packing and axolotl's multipack do), else into
// a new row; every row is then padded. Each document keeps its own positions and attention, so a
// response always trains with its prompt in view. A document longer than seq_len is truncated (as
// without packing) and fills a row alone. Rows come out in the order they were opened.
//
// packing = false (PackingMode::None): one document per row, truncated to seq_len (the cut-off tokens are
// dropped, the kept part's last token predicts nothing), then padded.
//
// Padding: token id kPadTokenId, target kIgnoreIndex, position 0, and each pad token is its own
// document (doc_start[t] = t) so it attends only to itself and nothing attends to it.
#pragma once

#include <cstdint>
#include <vector>

#include "data/document.h"

namespace ferry {

inline constexpr int32_t kPadTokenId = 0;

enum class PackingMode { None, Split, BestFit };

struct PackedRow {
  std::vector<int32_t> input_ids;  // (seq_len)
  std::vector<int32_t> targets;    // (seq_len) targets[t] = labels[t+1] of t's document; kIgnoreIndex at a
                                   // document's (or part's) last token and on padding
  std::vector<int32_t> positions;  // (seq_len) index of t within its document (part), 0 at its start
  std::vector<int32_t> doc_start;  // (seq_len) index within the row of the first token of t's document
};

struct PackStats {
  int64_t rows = 0;
  int64_t documents = 0;            // non-empty documents packed
  int64_t empty_documents = 0;      // documents without tokens, ignored
  int64_t split_documents = 0;      // split packing: documents cut across rows
  int64_t truncated_documents = 0;  // no or best-fit packing: documents longer than seq_len
  int64_t dropped_tokens = 0;       // no or best-fit packing: tokens cut off by truncation
  int64_t pad_tokens = 0;
  int64_t target_tokens = 0;  // targets that are not kIgnoreIndex (the loss's denominator)
};

// True when every token of the row belongs to the document that starts the row, except trailing
// tokens that reach nothing: documents of one token each without a target (padding, or a last
// document of one token). Attention may then treat the row as one causal sequence
// (AttentionMask::row_tokens in ops/ops.h): no token that reaches the loss sees a difference.
bool attends_as_one_sequence(const PackedRow& row);

// The row cut into segments that attention may treat as causal sequences of their own
// (AttentionMask::segment_bounds in ops/ops.h): the offset within the row of each segment's first
// token, the first 0 (for a row of at least one token). Each document starts a segment, except a
// document of one token without a target, which reaches nothing and joins the segment before it
// (padding, a last one-token document); one at the row's start starts the first segment, and the
// like of it that follow join that one. A row that attends_as_one_sequence is the one segment {0}.
std::vector<int32_t> attention_segments(const PackedRow& row);

// A row that counts nothing (every target kIgnoreIndex): it fills the last micro-chunk of an
// evaluation whose rows do not divide into micro-chunks, without changing its loss.
PackedRow padding_row(int64_t seq_len);

// Throws ferry::Error when seq_len < 1. Rows are exactly seq_len long. Split and truncated documents
// are logged as warnings, with their counts.
std::vector<PackedRow> pack_documents(const std::vector<Document>& documents, int64_t seq_len,
                                      PackingMode mode, PackStats* stats = nullptr);
// packing true: PackingMode::Split; false: None.
std::vector<PackedRow> pack_documents(const std::vector<Document>& documents, int64_t seq_len, bool packing,
                                      PackStats* stats = nullptr);

}  // namespace ferry
