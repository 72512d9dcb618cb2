#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

// Replaces every piece without an id by what `fn(piece, out)` appends.
template <typename F>
void split_each(std::vector<Piece>& pieces, F&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (auto& piece : pieces) {
    if (piece.id >= 0) {
      out.push_back(std::move(piece));
      continue;
    }
    fn(piece, out);
  }
  pieces = std::move(out);
}

// Each character for which pred holds is a match of its own (HF's Pattern for Fn(char) -> bool).
template <typename Pred>
void char_matches(const std::string& text, Pred&& pred, Ranges& matches) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    const char32_t cp = next_code_point(text, i);
    if (pred(cp)) matches.emplace_back(start, i);
  }
}

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail("tokenizer",
       "split behavior '{}' is unknown (expected Removed, Isolated, MergedWithPrevious, MergedWithNext "
       "or Contiguous)",
       name);
}

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), regex_(Regex::pattern(kGpt2Pattern)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Ranges matches;
    split_each(pieces, [&](Piece& piece, std::vector<Piece>& out) {
      if (add_prefix_space_ && (piece.text.empty() || piece.text[0] != ' '))
        piece.text.insert(piece.text.begin(), ' ');
      if (!use_regex_) {
        if (!piece.text.empty()) out.push_back(std::move(piece));
        return;
      }
      matches.clear();
      regex_.find_all(piece.text, matches);
      split_piece(piece, matches, SplitBehavior::Isolated, false, out);
    });
    std::string mapped;
    for (auto& piece : pieces) {
      if (piece.id >= 0) continue;
      mapped.clear();
      append_byte_level(mapped, piece.text);
      piece.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex regex_;
};

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Ranges matches;
    split_each(pieces, [&](Piece& piece, std::vector<Piece>& out) {
      matches.clear();
      pattern_.find_all(piece.text, matches);
      split_piece(piece, matches, behavior_, invert_, out);
    });
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class DigitsPre final : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Ranges matches;
    split_each(pieces, [&](Piece& piece, std::vector<Piece>& out) {
      matches.clear();
      char_matches(
          piece.text, [](char32_t c) { return c >= '0' && c <= '9'; }, matches);
      split_piece(piece, matches, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false,
                  out);
    });
  }

 private:
  bool individual_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePre final : public PreTokenizer {
 public:
  MetaspacePre(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(replacement_utf8_, replacement);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Ranges matches;
    split_each(pieces, [&](Piece& piece, std::vector<Piece>& out) {
      std::string text;
      text.reserve(piece.text.size() + 3);
      for (const char c : piece.text) {
        if (c == ' ')
          text += replacement_utf8_;
        else
          text.push_back(c);
      }
      const bool starts = text.compare(0, replacement_utf8_.size(), replacement_utf8_) == 0;
      if (!starts &&
          (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && piece.at_origin)))
        text.insert(0, replacement_utf8_);
      piece.text = std::move(text);
      if (!split_) {
        if (!piece.text.empty()) out.push_back(std::move(piece));
        return;
      }
      matches.clear();
      char_matches(
          piece.text, [&](char32_t c) { return c == replacement_; }, matches);
      split_piece(piece, matches, SplitBehavior::MergedWithNext, false, out);
    });
  }

 private:
  char32_t replacement_;
  std::string replacement_utf8_;
  PrependScheme scheme_;
  bool split_;
};

// Whitespace: runs of word characters and runs of other non-space characters (\w+|[^\w\s]+).
class WhitespacePre final : public PreTokenizer {
 public:
  WhitespacePre() : regex_(Regex::pattern(R"(\w+|[^\w\s]+)")) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Ranges matches;
    split_each(pieces, [&](Piece& piece, std::vector<Piece>& out) {
      matches.clear();
      regex_.find_all(piece.text, matches);
      split_piece(piece, matches, SplitBehavior::Removed, true, out);
    });
  }

 private:
  Regex regex_;
};

class WhitespaceSplitPre final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Ranges matches;
    split_each(pieces, [&](Piece& piece, std::vector<Piece>& out) {
      matches.clear();
      char_matches(piece.text, is_unicode_white_space, matches);
      split_piece(piece, matches, SplitBehavior::Removed, false, out);
    });
  }
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

void split_piece(const Piece& piece, const Ranges& matches, SplitBehavior behavior, bool invert,
                 std::vector<Piece>& out) {
  // (start, end, is_match) covering the whole text, as HF's Pattern::find_matches returns them.
  struct Span {
    size_t start, end;
    bool match;
  };
  std::vector<Span> spans;
  const std::string& text = piece.text;
  if (text.empty()) {
    spans.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (const auto& [start, end] : matches) {
      if (prev != start) spans.push_back({prev, start, false});
      spans.push_back({start, end, true});
      prev = end;
    }
    if (prev != text.size()) spans.push_back({prev, text.size(), false});
  }
  if (invert)
    for (auto& s : spans) s.match = !s.match;

  // (start, end, remove)
  std::vector<Span> cuts;
  cuts.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& s : spans) cuts.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::Removed:
      cuts = spans;
      break;
    case SplitBehavior::Contiguous: {
      bool previous = false;
      for (const auto& s : spans) {
        if (s.match == previous && !cuts.empty())
          cuts.back().end = s.end;
        else
          cuts.push_back({s.start, s.end, false});
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous = false;
      for (const auto& s : spans) {
        if (s.match && !previous && !cuts.empty())
          cuts.back().end = s.end;
        else
          cuts.push_back({s.start, s.end, false});
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const auto& s = spans[k];
        if (s.match && !previous && !cuts.empty())
          cuts.back().start = s.start;
        else
          cuts.push_back({s.start, s.end, false});
        previous = s.match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
    }
  }
  for (const auto& c : cuts) {
    if (c.match || c.end == c.start) continue;  // `match` means "remove" here
    Piece p;
    p.text.assign(text, c.start, c.end - c.start);
    p.at_origin = piece.at_origin && c.start == 0;
    out.push_back(std::move(p));
  }
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  const std::string type = json_string(config, "type", "pre_tokenizer");
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPre>(
        json_bool(config, "add_prefix_space", true, "the ByteLevel pre_tokenizer"),
        json_bool(config, "use_regex", true, "the ByteLevel pre_tokenizer"));
  }
  if (type == "Split") {
    return std::make_unique<SplitPre>(json_pattern(config, "Split pre_tokenizer"),
                                      parse_behavior(json_string(config, "behavior", "Split pre_tokenizer")),
                                      json_bool(config, "invert", false, "the Split pre_tokenizer"));
  }
  if (type == "Digits")
    return std::make_unique<DigitsPre>(
        json_bool(config, "individual_digits", false, "the Digits pre_tokenizer"));
  if (type == "Metaspace") {
    const char32_t replacement = json_char(config, "replacement", "Metaspace pre_tokenizer",
                                           "\"replacement\" of the Metaspace pre_tokenizer");
    PrependScheme scheme = json_bool(config, "add_prefix_space", true, "the Metaspace pre_tokenizer")
                               ? PrependScheme::Always
                               : PrependScheme::Never;
    if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null()) {
      const std::string s = json_string(config, "prepend_scheme", "always", "the Metaspace pre_tokenizer");
      if (s == "always")
        scheme = PrependScheme::Always;
      else if (s == "first")
        scheme = PrependScheme::First;
      else if (s == "never")
        scheme = PrependScheme::Never;
      else
        fail("tokenizer", "Metaspace prepend_scheme '{}' is unknown (expected always, first or never)", s);
    }
    return std::make_unique<MetaspacePre>(replacement, scheme,
                                          json_bool(config, "split", true, "the Metaspace pre_tokenizer"));
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : json_array(config, "pretokenizers", "Sequence pre_tokenizer")) {
      auto p = make_pre_tokenizer(step);
      if (p) steps.push_back(std::move(p));
    }
    return std::make_unique<SequencePre>(std::move(steps));
  }
  fail("tokenizer",
       "pre_tokenizer type '{}' is not supported by ferry (supported: ByteLevel, Split, Digits, "
       "Metaspace, Whitespace, WhitespaceSplit, Sequence)",
       type);
}

}  // namespace ferry::tok
