// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend,
// Replace and Sequence, with Hugging Face tokenizers' semantics. A normalizer rewrites one piece
// of text (the text between added tokens) in place; the text is valid UTF-8 and stays so.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace ferry::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer a tokenizer.json "normalizer" object describes; null for JSON null.
// Throws ferry::Error for a type ferry does not implement.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config);

// Unicode normalization forms through utf8proc.
enum class UnicodeForm { NFC, NFD, NFKC, NFKD };
std::string unicode_normalize(const std::string& text, UnicodeForm form);

}  // namespace ferry::tok
