#include "data/training_text.h"

#include "core/error.h"

namespace ferry {

TokenizeStats& TokenizeStats::operator+=(const TokenizeStats& other) {
  encoded_by_range += other.encoded_by_range;
  eos_inserted += other.eos_inserted;
  trained_tokens += other.trained_tokens;
  return *this;
}

void check_training_text(const TrainingText& t) {
  FERRY_ASSERT(t.eos_after.size() == t.trained.size(), "one eos flag per trained range");
  size_t previous_end = 0;
  for (size_t i = 0; i < t.trained.size(); ++i) {
    const ByteRange& r = t.trained[i];
    FERRY_ASSERT(r.begin < r.end && r.end <= t.text.size(),
                 "trained ranges are non-empty and inside the text");
    FERRY_ASSERT(i == 0 || r.begin >= previous_end, "trained ranges are sorted and disjoint");
    previous_end = r.end;
  }
}

namespace {

// Encodes the text piece by piece, cut at every range boundary, so that the boundaries fall between
// tokens. Each token's range is its whole piece, which is all the labelling rule needs.
void encode_by_range(const TrainingText& t, const TextEncoder& encoder, std::vector<int32_t>* ids,
                     std::vector<ByteRange>* ranges) {
  std::vector<size_t> cuts = {0};
  for (const ByteRange& r : t.trained) {
    if (r.begin != cuts.back()) cuts.push_back(r.begin);
    cuts.push_back(r.end);
  }
  if (cuts.back() != t.text.size()) cuts.push_back(t.text.size());
  ids->clear();
  ranges->clear();
  if (t.add_special_tokens) {
    for (int32_t id : encoder.special_prefix()) {
      ids->push_back(id);
      ranges->push_back({0, 0});
    }
  }
  std::vector<int32_t> piece_ids;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const ByteRange piece{cuts[i], cuts[i + 1]};
    if (piece.begin == piece.end) continue;
    encoder.encode(std::string_view(t.text).substr(piece.begin, piece.end - piece.begin), false, &piece_ids,
                   nullptr);
    for (int32_t id : piece_ids) {
      ids->push_back(id);
      ranges->push_back(piece);
    }
  }
  if (t.add_special_tokens) {
    for (int32_t id : encoder.special_suffix()) {
      ids->push_back(id);
      ranges->push_back({t.text.size(), t.text.size()});
    }
  }
}

bool overlaps(const ByteRange& token, const ByteRange& r) {
  if (token.begin == token.end) return r.begin <= token.begin && token.begin < r.end;
  return token.begin < r.end && r.begin < token.end;
}

}  // namespace

Document tokenize_training_text(const TrainingText& t, const TextEncoder& encoder, TokenizeStats* stats) {
  check_training_text(t);
  TokenizeStats s;
  bool any_eos = false;
  for (bool e : t.eos_after) any_eos = any_eos || e;
  std::optional<int32_t> eos = encoder.eos_token_id();
  if (any_eos)
    FERRY_CHECK(
        eos.has_value(), "data",
        "the tokenizer has no eos token, so the end of a completion cannot be marked; set eos_token in "
        "tokenizer_config.json");
  // The tokenizer's own eos (add_special_tokens) ends a text whose last range reaches the end.
  const bool tokenizer_eos_ends_range = t.add_special_tokens && encoder.adds_eos() && !t.trained.empty() &&
                                        t.trained.back().end == t.text.size() && t.eos_after.back();

  std::vector<int32_t> ids;
  std::vector<ByteRange> ranges;
  const bool everything =
      t.trained.size() == 1 && t.trained[0].begin == 0 && t.trained[0].end == t.text.size();
  if (t.trained.empty() || everything) {
    encoder.encode(t.text, t.add_special_tokens, &ids, nullptr);
    ranges.assign(ids.size(), ByteRange{0, 0});  // unused below
  } else if (!encoder.encode(t.text, t.add_special_tokens, &ids, &ranges)) {
    encode_by_range(t, encoder, &ids, &ranges);
    s.encoded_by_range = 1;
  }

  Document doc;
  doc.input_ids.reserve(ids.size() + t.trained.size());
  doc.labels.reserve(ids.size() + t.trained.size());
  auto push = [&](int32_t id, bool trained) {
    doc.input_ids.push_back(id);
    doc.labels.push_back(trained ? id : kIgnoreIndex);
    if (trained) ++s.trained_tokens;
  };

  if (t.trained.empty() || everything) {
    for (int32_t id : ids) push(id, everything);
    if (everything && t.eos_after[0] && !tokenizer_eos_ends_range) {
      push(*eos, true);
      ++s.eos_inserted;
    }
  } else {
    // last[m]: the last token overlapping range m (-1: none).
    std::vector<int64_t> last(t.trained.size(), -1);
    std::vector<bool> trained(ids.size(), false);
    size_t first_range = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      const ByteRange& tr = ranges[j];
      // Token ranges never go backwards, so ranges that end before this token are done with.
      while (first_range < t.trained.size() && t.trained[first_range].end <= tr.begin) ++first_range;
      for (size_t m = first_range; m < t.trained.size() && t.trained[m].begin <= tr.end; ++m) {
        if (overlaps(tr, t.trained[m])) {
          trained[j] = true;
          last[m] = static_cast<int64_t>(j);
        }
      }
      if (tokenizer_eos_ends_range && tr.begin == t.text.size() && tr.end == t.text.size()) trained[j] = true;
    }
    size_t m = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      push(ids[j], trained[j]);
      for (; m < t.trained.size() && last[m] <= static_cast<int64_t>(j); ++m) {
        if (last[m] != static_cast<int64_t>(j) || !t.eos_after[m]) continue;
        if (tokenizer_eos_ends_range && m + 1 == t.trained.size()) continue;
        push(*eos, true);
        ++s.eos_inserted;
      }
    }
  }
  if (stats) *stats += s;
  return doc;
}

}  // namespace ferry
