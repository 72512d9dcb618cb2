#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

namespace {

bool is_ascii(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Characters that NFC leaves alone whatever surrounds them, except for marks that follow them
// (which are not inert themselves): no canonical decomposition, combining class 0, never the second
// of a composition. A conservative list of the common ranges; everything else takes utf8proc.
bool nfc_inert(char32_t cp) {
  return cp < 0x300 || (cp >= 0x2010 && cp <= 0x205E) || (cp >= 0x3000 && cp <= 0x3029) ||
         (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x309B && cp <= 0x30FF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xFF01 && cp <= 0xFF5E) ||
         (cp >= 0x1F000 && cp <= 0x1FAFF);
}

// NFC of text, normalizing only where it can change anything. NFC(a + b) = NFC(a) + NFC(b) when b
// starts with an ASCII character (a starter that composes with nothing before it), so the text is
// cut before each ASCII character and only the pieces holding a non-inert character go to utf8proc.
void nfc_in_place(std::string& text) {
  size_t i = 0;
  bool inert = true;
  while (i < text.size() && inert) inert = nfc_inert(next_code_point(text, i));
  if (inert) return;
  std::string out;
  out.reserve(text.size() + 8);
  size_t start = 0;
  i = 0;
  bool clean = true;
  auto flush = [&](size_t end) {
    if (clean)
      out.append(text, start, end - start);
    else
      out += unicode_normalize(text.substr(start, end - start), UnicodeForm::NFC);
    start = end;
    clean = true;
  };
  while (i < text.size()) {
    const size_t at = i;
    const char32_t cp = next_code_point(text, i);
    if (cp < 0x80 && at > start) flush(at);
    if (!nfc_inert(cp)) clean = false;
  }
  flush(text.size());
  text = std::move(out);
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void normalize(std::string& text) const override {
    if (is_ascii(text)) return;  // ASCII is invariant under all four forms
    if (form_ == UnicodeForm::NFC)
      nfc_in_place(text);
    else
      text = unicode_normalize(text, form_);
  }

 private:
  UnicodeForm form_;
};

// Rust's char::to_lowercase, one character at a time: the simple mapping, except U+0130 whose
// full lowercase is two characters. No context (final sigma stays σ), as in HF.
class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      const char32_t cp = next_code_point(text, i);
      if (cp < 0x80) {
        out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
      } else if (cp == 0x130) {
        out += "i\xCC\x87";
      } else {
        append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
      }
    }
    text = std::move(out);
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_unicode_white_space(next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t probe = start;
        if (!is_unicode_white_space(next_code_point(text, probe))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    pattern_.find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size());
    size_t at = 0;
    for (const auto& [start, end] : matches) {
      out.append(text, at, start - at);
      out += content_;
      at = end;
    }
    out.append(text, at, std::string::npos);
    text = std::move(out);
  }

 private:
  Regex pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::string unicode_normalize(const std::string& text, UnicodeForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case UnicodeForm::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case UnicodeForm::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case UnicodeForm::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) fail("tokenizer", "Unicode normalization failed: {}", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  const std::string type = json_string(config, "type", "normalizer");
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(json_bool(config, "strip_left", true, "the Strip normalizer"),
                                   json_bool(config, "strip_right", true, "the Strip normalizer"));
  if (type == "Prepend")
    return std::make_unique<Prepend>(json_string(config, "prepend", "Prepend normalizer"));
  if (type == "Replace")
    return std::make_unique<Replace>(json_pattern(config, "Replace normalizer"),
                                     json_string(config, "content", "Replace normalizer"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : json_array(config, "normalizers", "Sequence normalizer")) {
      auto n = make_normalizer(step);
      if (n) steps.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  fail("tokenizer",
       "normalizer type '{}' is not supported by ferry (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
       "Strip, Prepend, Replace, Sequence)",
       type);
}

}  // namespace ferry::tok
