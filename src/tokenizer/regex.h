// The regular expressions of tokenizer.json, matched with PCRE2 (UTF + UCP, JIT-compiled).
//
// Hugging Face tokenizers compiles these patterns with Oniguruma (Ruby syntax). The two engines
// are both backtracking and agree on the patterns tokenizers use (\p{L}, \p{N}, lookahead,
// (?i:...)); where their defaults differ, the pattern is translated (onig_to_pcre2):
//   \s \S   Oniguruma: Unicode White_Space (incl. U+0085); PCRE2's \s lacks U+0085
//   \w \W   Oniguruma: letters, marks, Nd, Nl, Pc; PCRE2's \w is letters, all numbers and '_'
//   ^ $     Ruby anchors match at every line: PCRE2_MULTILINE
// A Regex is immutable and may be used from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::tok {

// Rewrites an Oniguruma (Ruby syntax) pattern into the PCRE2 pattern with the same meaning.
std::string onig_to_pcre2(std::string_view pattern);

class Regex {
 public:
  // A regular expression in Oniguruma syntax. Throws ferry::Error when it does not compile.
  static Regex pattern(std::string_view onig_pattern);
  // Matches `text` literally (tokenizer.json's {"String": ...} patterns).
  static Regex literal(std::string_view text);

  // Appends the (start, end) byte ranges of the non-overlapping matches in `text`, left to right.
  // `text` must be valid UTF-8. An empty match is followed by a search one character further on.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  const std::string& source() const { return source_; }

 private:
  struct Compiled;
  std::string source_;
  std::string literal_;  // used when compiled_ is null
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace ferry::tok
