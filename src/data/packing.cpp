#include "data/packing.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

PackedRow empty_row(int64_t seq_len) {
  PackedRow row;
  row.input_ids.resize(seq_len);
  row.targets.resize(seq_len);
  row.positions.resize(seq_len);
  row.doc_start.resize(seq_len);
  return row;
}

// Writes doc[offset, offset + count) at row[at, at + count) as one document of the row.
// Returns the number of real targets written.
int64_t place_part(const Document& doc, size_t offset, size_t count, PackedRow& row, size_t at) {
  int64_t targets = 0;
  for (size_t j = 0; j < count; ++j) {
    const size_t t = at + j;
    row.input_ids[t] = doc.input_ids[offset + j];
    // The part's last token has nothing after it in this row to predict.
    row.targets[t] = j + 1 < count ? doc.labels[offset + j + 1] : kIgnoreIndex;
    row.positions[t] = static_cast<int32_t>(j);
    row.doc_start[t] = static_cast<int32_t>(at);
    if (row.targets[t] != kIgnoreIndex) ++targets;
  }
  return targets;
}

void pad_from(PackedRow& row, size_t from) {
  for (size_t t = from; t < row.input_ids.size(); ++t) {
    row.input_ids[t] = kPadTokenId;
    row.targets[t] = kIgnoreIndex;
    row.positions[t] = 0;
    row.doc_start[t] = static_cast<int32_t>(t);
  }
}

void check_document(const Document& doc) {
  FERRY_ASSERT(doc.labels.size() == doc.input_ids.size(),
               "a document's labels and input_ids differ in length");
}

std::vector<PackedRow> pack_split(const std::vector<Document>& documents, size_t len, PackStats& s) {
  std::vector<PackedRow> rows;
  PackedRow row = empty_row(static_cast<int64_t>(len));
  size_t fill = 0;  // tokens already in `row`
  for (const Document& doc : documents) {
    check_document(doc);
    if (doc.input_ids.empty()) {
      ++s.empty_documents;
      continue;
    }
    ++s.documents;
    size_t offset = 0;
    while (offset < doc.input_ids.size()) {
      if (fill == len) {
        rows.push_back(std::move(row));
        row = empty_row(static_cast<int64_t>(len));
        fill = 0;
      }
      const size_t count = std::min(doc.input_ids.size() - offset, len - fill);
      if (offset == 0 && count < doc.input_ids.size()) ++s.split_documents;
      s.target_tokens += place_part(doc, offset, count, row, fill);
      offset += count;
      fill += count;
    }
  }
  if (fill > 0) {
    s.pad_tokens += static_cast<int64_t>(len - fill);
    pad_from(row, fill);
    rows.push_back(std::move(row));
  }
  return rows;
}

// One document per row, truncated to the row.
std::vector<PackedRow> pack_none(const std::vector<Document>& documents, size_t len, PackStats& s) {
  std::vector<PackedRow> rows;
  for (const Document& doc : documents) {
    check_document(doc);
    if (doc.input_ids.empty()) {
      ++s.empty_documents;
      continue;
    }
    ++s.documents;
    const size_t count = std::min(doc.input_ids.size(), len);
    if (count < doc.input_ids.size()) {
      ++s.truncated_documents;
      s.dropped_tokens += static_cast<int64_t>(doc.input_ids.size() - count);
    }
    PackedRow row = empty_row(static_cast<int64_t>(len));
    s.target_tokens += place_part(doc, 0, count, row, 0);
    s.pad_tokens += static_cast<int64_t>(len - count);
    pad_from(row, count);
    rows.push_back(std::move(row));
  }
  return rows;
}

// Best-fit decreasing: longest documents first, each into the row with the least free space that
// still holds it. The rows' free space is kept in a multimap (free tokens -> row), so a placement is
// one lower_bound: O(documents · log rows).
std::vector<PackedRow> pack_best_fit(const std::vector<Document>& documents, size_t len, PackStats& s) {
  std::vector<size_t> order;
  for (size_t i = 0; i < documents.size(); ++i) {
    check_document(documents[i]);
    if (documents[i].input_ids.empty())
      ++s.empty_documents;
    else
      order.push_back(i);
  }
  // Ties keep the data's order, so the packing depends on nothing but the documents.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return documents[a].input_ids.size() > documents[b].input_ids.size();
  });
  std::vector<PackedRow> rows;
  std::vector<size_t> fill;
  std::multimap<size_t, size_t> open;  // free tokens -> row index, for rows with room left
  for (size_t i : order) {
    const Document& doc = documents[i];
    ++s.documents;
    const size_t count = std::min(doc.input_ids.size(), len);
    if (count < doc.input_ids.size()) {
      ++s.truncated_documents;
      s.dropped_tokens += static_cast<int64_t>(doc.input_ids.size() - count);
    }
    size_t r;
    const auto fit = open.lower_bound(count);
    if (fit != open.end()) {
      r = fit->second;
      open.erase(fit);
    } else {
      r = rows.size();
      rows.push_back(empty_row(static_cast<int64_t>(len)));
      fill.push_back(0);
    }
    s.target_tokens += place_part(doc, 0, count, rows[r], fill[r]);
    fill[r] += count;
    if (fill[r] < len) open.emplace(len - fill[r], r);
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    s.pad_tokens += static_cast<int64_t>(len - fill[r]);
    pad_from(rows[r], fill[r]);
  }
  return rows;
}

}  // namespace

bool attends_as_one_sequence(const PackedRow& row) {
  const size_t n = row.doc_start.size();
  size_t t = 0;
  while (t < n && row.doc_start[t] == 0) ++t;
  for (; t < n; ++t)
    if (row.doc_start[t] != static_cast<int32_t>(t) || row.targets[t] != kIgnoreIndex) return false;
  return true;
}

std::vector<int32_t> attention_segments(const PackedRow& row) {
  const size_t n = row.doc_start.size();
  std::vector<int32_t> starts;
  size_t end = 0;
  for (size_t t = 0; t < n; t = end) {
    // The document [t, end): the run of tokens sharing t's doc_start.
    for (end = t + 1; end < n && row.doc_start[end] == row.doc_start[t];) ++end;
    const bool reaches_nothing = end == t + 1 && row.targets[t] == kIgnoreIndex;
    if (starts.empty() || !reaches_nothing) starts.push_back(static_cast<int32_t>(t));
  }
  return starts;
}

std::vector<PackedRow> pack_documents(const std::vector<Document>& documents, int64_t seq_len,
                                      PackingMode mode, PackStats* stats) {
  FERRY_CHECK(seq_len >= 1, "data", "seq_len is {}; it must be at least 1", seq_len);
  FERRY_CHECK(seq_len <= INT32_MAX, "data", "seq_len {} is too large", seq_len);
  const size_t len = static_cast<size_t>(seq_len);
  PackStats s;
  std::vector<PackedRow> rows = mode == PackingMode::Split     ? pack_split(documents, len, s)
                                : mode == PackingMode::BestFit ? pack_best_fit(documents, len, s)
                                                               : pack_none(documents, len, s);
  s.rows = static_cast<int64_t>(rows.size());
  // Lost or cut training data is said once, with the numbers (DESIGN.md §6.9).
  if (s.truncated_documents > 0)
    log_warn(
        "[data] {} of {} documents are longer than seq_len {} and were truncated ({} tokens dropped); raise "
        "seq_len to keep them whole",
        s.truncated_documents, s.documents, seq_len, s.dropped_tokens);
  if (s.split_documents > 0)
    log_warn(
        "[data] {} of {} documents were split across rows (packing_strategy: split); a continuation trains "
        "without the text before it",
        s.split_documents, s.documents);
  if (s.empty_documents > 0) log_warn("[data] {} documents without tokens were dropped", s.empty_documents);
  if (stats) *stats = s;
  return rows;
}

std::vector<PackedRow> pack_documents(const std::vector<Document>& documents, int64_t seq_len, bool packing,
                                      PackStats* stats) {
  return pack_documents(documents, seq_len, packing ? PackingMode::Split : PackingMode::None, stats);
}

PackedRow padding_row(int64_t seq_len) {
  PackedRow row;
  const size_t n = static_cast<size_t>(seq_len);
  row.input_ids.assign(n, 0);
  row.targets.assign(n, kIgnoreIndex);
  row.positions.resize(n);
  for (size_t t = 0; t < n; ++t) row.positions[t] = static_cast<int32_t>(t);
  row.doc_start.assign(n, 0);
  return row;
}

}  // namespace ferry
