#include "tokenizer/added_vocabulary.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

namespace {

// The code point that ends at text[end) (text valid UTF-8, end > 0).
char32_t code_point_before(const std::string& text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

}  // namespace

void AddedVocabulary::Trie::insert(const std::string& pattern, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t node = 0;
  for (const char c : pattern) {
    const auto b = static_cast<uint8_t>(c);
    const auto it = nodes[node].next.find(b);
    if (it != nodes[node].next.end()) {
      node = it->second;
    } else {
      const auto created = static_cast<int32_t>(nodes.size());
      nodes[node].next.emplace(b, created);
      nodes.emplace_back();
      node = created;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // the first of equal contents wins
  first_byte[static_cast<uint8_t>(pattern[0])] = true;
}

size_t AddedVocabulary::Trie::longest(const std::string& text, size_t at, int32_t* token) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto it = nodes[node].next.find(static_cast<uint8_t>(text[i]));
    if (it == nodes[node].next.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = i + 1 - at;
      *token = nodes[node].token;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t k = 0; k < tokens_.size(); ++k) {
    const AddedToken& t = tokens_[k];
    by_id_.emplace(t.id, k);
    by_content_.emplace(t.content, k);
    if (t.content.empty()) continue;
    if (t.normalized) {
      std::string pattern = t.content;
      if (normalizer != nullptr) normalizer->normalize(pattern);
      if (!pattern.empty()) normalized_.insert(pattern, static_cast<int32_t>(k));
    } else {
      raw_.insert(t.content, static_cast<int32_t>(k));
    }
  }
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(const std::string& content) const {
  const auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::split(std::vector<Piece>& pieces, bool normalized_set) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  if (trie.nodes.empty()) return;
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (auto& piece : pieces) {
    if (piece.id >= 0)
      out.push_back(std::move(piece));
    else
      split_piece(piece, trie, out);
  }
  pieces = std::move(out);
}

void AddedVocabulary::split_piece(const Piece& piece, const Trie& trie, std::vector<Piece>& out) const {
  const std::string& text = piece.text;
  size_t start_offset = 0;  // end of the last token taken
  auto emit_text = [&](size_t from, size_t to) {
    if (to <= from) return;
    Piece p;
    p.text.assign(text, from, to - from);
    p.at_origin = piece.at_origin && from == 0;
    out.push_back(std::move(p));
  };
  size_t at = 0;
  while (at < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[at])]) {
      ++at;
      continue;
    }
    int32_t index = -1;
    const size_t length = trie.longest(text, at, &index);
    if (length == 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = at, stop = at + length;
    at = stop;  // matches never overlap, even when this one is dropped below
    if (token.single_word) {
      const bool left_ok = start == 0 || !is_word_char(code_point_before(text, start));
      size_t probe = stop;
      const bool right_ok = stop == text.size() || !is_word_char(next_code_point(text, probe));
      if (!left_ok || !right_ok) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t cp_start = s - 1;
        while (cp_start > 0 && (static_cast<unsigned char>(text[cp_start]) & 0xC0) == 0x80) --cp_start;
        size_t probe = cp_start;
        if (!is_unicode_white_space(next_code_point(text, probe))) break;
        s = cp_start;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t probe = stop;
        if (!is_unicode_white_space(next_code_point(text, probe))) break;
        stop = probe;
      }
      at = stop;
    }
    emit_text(start_offset, start);
    Piece p;
    p.text.assign(text, start, stop - start);
    p.id = token.id;
    out.push_back(std::move(p));
    start_offset = stop;
  }
  emit_text(start_offset, text.size());
}

}  // namespace ferry::tok
