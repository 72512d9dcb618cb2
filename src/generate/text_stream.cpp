#include "generate/text_stream.h"

namespace ferry {

namespace {

// Bytes at the end of `s` that start a UTF-8 character not yet complete, or a replacement
// character (U+FFFD, what a lossy decode makes of an incomplete one).
size_t incomplete_tail(const std::string& s) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0) return 3;
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

}  // namespace

std::string TextStream::text() const {
  return tokenizer_.decode(tokens_, true);
}

std::string TextStream::pending(bool at_end) {
  const std::string all = text();
  // Decoding more tokens normally extends the text; where a decoder rewrites earlier text,
  // nothing more is printed (the whole reply is still text()).
  if (all.compare(0, emitted_.size(), emitted_) != 0) return "";
  const size_t end = at_end ? all.size() : all.size() - incomplete_tail(all);
  if (end <= emitted_.size()) return "";
  std::string out = all.substr(emitted_.size(), end - emitted_.size());
  emitted_ += out;
  return out;
}

std::string TextStream::push(int32_t token) {
  tokens_.push_back(token);
  return pending(false);
}

std::string TextStream::finish() {
  return pending(true);
}

}  // namespace ferry
