#include "tokenizer/decoder.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

namespace {

// All tokens → their bytes (a token with a character outside the alphabet keeps its own UTF-8
// bytes) → one string, invalid UTF-8 repaired.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens)
      if (!append_byte_level_bytes(bytes, t)) bytes += t;
    std::string text;
    text.reserve(bytes.size());
    append_repaired_utf8(text, bytes);
    tokens.assign(1, std::move(text));
  }
};

// Runs of <0xNN> tokens → their bytes as text, or one U+FFFD per byte when not valid UTF-8.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (auto& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') value = parse_hex_byte(t[3], t[4]);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Rust's u8::from_str_radix(s, 16) for two characters: a leading '+' is allowed.
  static int parse_hex_byte(char a, char b) {
    if (a == '+') return hex(b);
    const int hi = hex(a), lo = hex(b);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters of every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<size_t> bounds;  // byte offset of each character, then the end
      std::vector<char32_t> chars;
      size_t i = 0;
      while (i < t.size()) {
        bounds.push_back(i);
        chars.push_back(next_code_point(t, i));
      }
      bounds.push_back(t.size());
      size_t start_cut = 0;
      for (size_t k = 0; k < std::min(start_, chars.size()) && chars[k] == content_; ++k) start_cut = k + 1;
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < std::min(stop_, chars.size()); ++k) {
        const size_t index = chars.size() - k - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      // HF panics when the cuts cross (a token made only of `content`); ferry yields "".
      if (stop_cut < start_cut) stop_cut = start_cut;
      t = t.substr(bounds[start_cut], bounds[stop_cut] - bounds[start_cut]);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (auto& t : tokens) {
      matches.clear();
      pattern_.find_all(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t at = 0;
      for (const auto& [s, e] : matches) {
        out.append(t, at, s - at);
        out += content_;
        at = e;
      }
      out.append(t, at, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Replacement characters become spaces, except in the first token (when a prefix is prepended at
// encoding), where they are dropped.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool drop_first)
      : replacement_(replacement), drop_first_(drop_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string& t = tokens[k];
      std::string out;
      out.reserve(t.size());
      size_t i = 0;
      while (i < t.size()) {
        const size_t start = i;
        const char32_t cp = next_code_point(t, i);
        if (cp == replacement_) {
          if (!(k == 0 && drop_first_)) out.push_back(' ');
        } else {
          out.append(t, start, i - start);
        }
      }
      t = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool drop_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  const std::string type = json_string(config, "type", "decoder");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(
        json_char(config, "content", "Strip decoder", "\"content\" of the Strip decoder"),
        json_count(config, "start", 0, "the Strip decoder"),
        json_count(config, "stop", 0, "the Strip decoder"));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(json_pattern(config, "Replace decoder"),
                                            json_string(config, "content", "Replace decoder"));
  }
  if (type == "Metaspace") {
    const char32_t replacement =
        json_char(config, "replacement", "Metaspace decoder", "\"replacement\" of the Metaspace decoder");
    bool drop_first = json_bool(config, "add_prefix_space", true, "the Metaspace decoder");
    if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null())
      drop_first = json_string(config, "prepend_scheme", "always", "the Metaspace decoder") != "never";
    return std::make_unique<MetaspaceDecoder>(replacement, drop_first);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : json_array(config, "decoders", "Sequence decoder")) {
      auto d = make_decoder(step);
      if (d) steps.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  fail("tokenizer",
       "decoder type '{}' is not supported by ferry (supported: ByteLevel, ByteFallback, Fuse, Strip, "
       "Replace, Metaspace, Sequence)",
       type);
}

}  // namespace ferry::tok
