#include "data/text_encoder.h"

#include "tokenizer/byte_level.h"

namespace ferry {

namespace {

bool matches_at(std::string_view text, size_t pos, std::string_view bytes) {
  return !bytes.empty() && pos + bytes.size() <= text.size() && text.compare(pos, bytes.size(), bytes) == 0;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// SentencePiece's reading of a token: "<0xNN>" is byte NN, and ▁ (U+2581) is a space.
std::string sentencepiece_bytes(const std::string& token) {
  if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
    const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  std::string out;
  static const std::string kSpace = "\xE2\x96\x81";
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, kSpace.size(), kSpace) == 0) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(token[i++]);
    }
  }
  return out;
}

}  // namespace

bool align_tokens(std::string_view text, const std::vector<int32_t>& ids,
                  const std::vector<std::optional<std::string>>& token_strings,
                  std::vector<ByteRange>* ranges) {
  ranges->clear();
  ranges->reserve(ids.size());
  size_t pos = 0;
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!token_strings[i] || token_strings[i]->empty()) return false;
    const std::string& token = *token_strings[i];
    // Byte-level BPE first, then the token as written (added tokens), then SentencePiece.
    bytes.clear();
    if (tok::append_byte_level_bytes(bytes, token) && matches_at(text, pos, bytes)) {
      ranges->push_back({pos, pos + bytes.size()});
      pos += bytes.size();
      continue;
    }
    if (matches_at(text, pos, token)) {
      ranges->push_back({pos, pos + token.size()});
      pos += token.size();
      continue;
    }
    bytes = sentencepiece_bytes(token);
    if (matches_at(text, pos, bytes)) {
      ranges->push_back({pos, pos + bytes.size()});
      pos += bytes.size();
      continue;
    }
    // The space a SentencePiece normalizer prepends to a piece of text is not in the text.
    if (bytes.size() > 1 && bytes[0] == ' ' && matches_at(text, pos, std::string_view(bytes).substr(1))) {
      ranges->push_back({pos, pos + bytes.size() - 1});
      pos += bytes.size() - 1;
      continue;
    }
    if (bytes == " " && (pos == text.size() || text[pos] != ' ')) {
      ranges->push_back({pos, pos});  // a lone prepended ▁
      continue;
    }
    return false;
  }
  return pos == text.size();
}

bool TokenizerTextEncoder::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids,
                                  std::vector<ByteRange>* ranges) const {
  ++calls_;
  const std::vector<int32_t> body = tokenizer_.encode(text, false);
  ids->clear();
  if (add_special_tokens)
    ids->insert(ids->end(), tokenizer_.special_prefix().begin(), tokenizer_.special_prefix().end());
  const size_t prefix = ids->size();
  ids->insert(ids->end(), body.begin(), body.end());
  if (add_special_tokens)
    ids->insert(ids->end(), tokenizer_.special_suffix().begin(), tokenizer_.special_suffix().end());
  if (!ranges) return true;
  std::vector<std::optional<std::string>> strings;
  strings.reserve(body.size());
  for (int32_t id : body) strings.push_back(tokenizer_.id_to_token(id));
  std::vector<ByteRange> body_ranges;
  const bool aligned = align_tokens(text, body, strings, &body_ranges);
  ranges->assign(prefix, ByteRange{0, 0});
  if (aligned) {
    ranges->insert(ranges->end(), body_ranges.begin(), body_ranges.end());
  } else {
    ranges->resize(prefix + body.size(), ByteRange{0, 0});
  }
  ranges->resize(ids->size(), ByteRange{text.size(), text.size()});
  return aligned;
}

}  // namespace ferry
