// Unit tests of the tokenizer's parts against hand-computed expectations: the byte-level
// alphabet, UTF-8 repair, regex translation and splitting, split behaviors, added-token cutting,
// Unicode normalization, BPE merging, byte fallback and unk, Metaspace, decoders, and errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry {
namespace {

using nlohmann::json;
using namespace ferry::tok;

const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> regex_pieces(const Regex& r, const std::string& text) {
  std::vector<std::pair<size_t, size_t>> m;
  r.find_all(text, m);
  std::vector<std::string> out;
  for (const auto& [s, e] : m) out.push_back(text.substr(s, e - s));
  return out;
}

std::vector<std::string> texts(const std::vector<Piece>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

TEST(ByteLevel, AlphabetMapsEveryByteToOneCharacterAndBack) {
  EXPECT_EQ(byte_to_char(' '), "\xC4\xA0");   // Ġ U+0120
  EXPECT_EQ(byte_to_char('\n'), "\xC4\x8A");  // Ċ U+010A
  EXPECT_EQ(byte_to_char(0x00), "\xC4\x80");  // Ā U+0100
  EXPECT_EQ(byte_to_char(0x7F), "\xC4\xA1");  // ġ U+0121: the 34th byte outside the printable ranges
  EXPECT_EQ(byte_to_char(0xAD), "\xC5\x83");  // Ń U+0143: soft hyphen, the last one
  EXPECT_EQ(byte_to_char('A'), "A");
  EXPECT_EQ(byte_to_char(0xE9), "\xC3\xA9");  // é stands for itself
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string mapped;
  append_byte_level(mapped, all);
  std::string back;
  ASSERT_TRUE(append_byte_level_bytes(back, mapped));
  EXPECT_EQ(back, all);
  EXPECT_EQ(char_to_byte(U'a'), 'a');
  EXPECT_EQ(char_to_byte(0x144), -1);
  EXPECT_EQ(char_to_byte(U'好'), -1);
  std::string partial = "x";
  EXPECT_FALSE(append_byte_level_bytes(partial, "ab好"));
  EXPECT_EQ(partial, "x");  // nothing appended
}

TEST(Utf8, RepairReplacesEachMaximalInvalidSequence) {
  EXPECT_EQ(repair_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(repair_utf8("h\xC3\xA9 \xF0\x9F\x98\x80"), "h\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(repair_utf8("a\x80"
                        "b"),
            "a\uFFFD"
            "b");
  EXPECT_EQ(repair_utf8("\xE2\x82"), "\uFFFD");                  // truncated 3-byte sequence: one
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98x"), "\uFFFDx");            // truncated 4-byte sequence: one
  EXPECT_EQ(repair_utf8("\xC0\xAF"), "\uFFFD\uFFFD");            // overlong lead, stray continuation
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate: each byte
  EXPECT_EQ(repair_utf8("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // above U+10FFFF
  EXPECT_EQ(repair_utf8("\xFF"), "\uFFFD");
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));
  EXPECT_TRUE(is_unicode_white_space(0x85));
  EXPECT_FALSE(is_unicode_white_space(0x200B));
  EXPECT_TRUE(is_word_char(0x301));  // combining acute
  EXPECT_FALSE(is_word_char('-'));
}

TEST(Regex, Llama3PatternSplitsAsHfDoes) {
  const Regex r = Regex::pattern(kLlama3Pattern);
  EXPECT_EQ(regex_pieces(r, "Hello world's 12345\n\n  x"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", "123", "45", "\n\n", " ", " x"}));
  // (?i:...) makes 'S a contraction too.
  EXPECT_EQ(regex_pieces(r, "IT'S"), (std::vector<std::string>{"IT", "'S"}));
}

TEST(Regex, OnigurumaClassesAndAnchors) {
  // \s includes U+0085 (NEL) as in Oniguruma, inside and outside classes.
  EXPECT_EQ(regex_pieces(Regex::pattern(R"(\s)"), "a\u0085b"), (std::vector<std::string>{"\u0085"}));
  EXPECT_EQ(regex_pieces(Regex::pattern(R"([^\s]+)"), "a\u0085b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(regex_pieces(Regex::pattern(R"(\S+)"), "ab\u0085cd"), (std::vector<std::string>{"ab", "cd"}));
  // ^ and $ match at every line, as in Ruby.
  EXPECT_EQ(regex_pieces(Regex::pattern("^a|b$"), "ab\nab"), (std::vector<std::string>{"a", "b", "a", "b"}));
  // An empty match never follows the previous match directly.
  std::vector<std::pair<size_t, size_t>> m;
  Regex::pattern("x*").find_all("abxxc", m);
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 1}, {2, 4}, {5, 5}}));
  EXPECT_EQ(
      onig_to_pcre2(R"([]\s])"),
      std::string("[]") +
          R"(\t\n\x0B\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}])");
  EXPECT_THROW(Regex::pattern("(unclosed"), Error);
  EXPECT_EQ(regex_pieces(Regex::literal("a.b"), "a.bxa.ba-b"), (std::vector<std::string>{"a.b", "a.b"}));
}

TEST(Split, BehaviorsMatchHf) {
  // Expected values printed by HF tokenizers for "-a--b-c-" split on "-".
  const std::vector<std::tuple<SplitBehavior, bool, std::vector<std::string>>> cases = {
      {SplitBehavior::Isolated, false, {"-", "a", "-", "-", "b", "-", "c", "-"}},
      {SplitBehavior::Removed, false, {"a", "b", "c"}},
      {SplitBehavior::Removed, true, {"-", "-", "-", "-", "-"}},
      {SplitBehavior::MergedWithPrevious, false, {"-", "a-", "-", "b-", "c-"}},
      {SplitBehavior::MergedWithPrevious, true, {"-a", "-", "-b", "-c", "-"}},
      {SplitBehavior::MergedWithNext, false, {"-a", "-", "-b", "-c", "-"}},
      {SplitBehavior::MergedWithNext, true, {"-", "a-", "-", "b-", "c-"}},
      {SplitBehavior::Contiguous, false, {"-", "a", "--", "b", "-", "c", "-"}},
  };
  const Regex dash = Regex::literal("-");
  for (const auto& [behavior, invert, expected] : cases) {
    Piece p;
    p.text = "-a--b-c-";
    p.at_origin = true;
    std::vector<std::pair<size_t, size_t>> m;
    dash.find_all(p.text, m);
    std::vector<Piece> out;
    split_piece(p, m, behavior, invert, out);
    EXPECT_EQ(texts(out), expected) << static_cast<int>(behavior) << " invert " << invert;
    ASSERT_GE(out.size(), 2u);
    // Only a piece starting at byte 0 of the original text is at its origin ("a" starts at 1).
    EXPECT_EQ(out[0].at_origin, !(behavior == SplitBehavior::Removed && !invert));
    EXPECT_FALSE(out[1].at_origin);
  }
}

TEST(PreTokenizers, MetaspaceDigitsAndByteLevel) {
  auto run = [](const json& config, const std::string& text) {
    auto pre = make_pre_tokenizer(config);
    std::vector<Piece> pieces(1);
    pieces[0].text = text;
    pieces[0].at_origin = true;
    pre->pre_tokenize(pieces);
    return texts(pieces);
  };
  EXPECT_EQ(
      run(json::parse(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true})"),
          "  hello  world "),
      (std::vector<std::string>{"▁", "▁hello", "▁", "▁world", "▁"}));
  EXPECT_EQ(
      run(json::parse(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":false})"),
          "hi there"),
      (std::vector<std::string>{"▁hi▁there"}));
  EXPECT_EQ(run(json::parse(R"({"type":"Digits","individual_digits":false})"), "a123b4"),
            (std::vector<std::string>{"a", "123", "b", "4"}));
  EXPECT_EQ(run(json::parse(R"({"type":"Digits","individual_digits":true})"), "a12"),
            (std::vector<std::string>{"a", "1", "2"}));
  EXPECT_EQ(run(json::parse(R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})"),
                "Hello  world's\n\n 123"),
            (std::vector<std::string>{"ĠHello", "Ġ", "Ġworld", "'s", "ĊĊ", "Ġ123"}));
  EXPECT_EQ(run(json::parse(R"({"type":"WhitespaceSplit"})"), " a\tb\u3000c "),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(run(json::parse(R"({"type":"Whitespace"})"), "Hey, you!"),
            (std::vector<std::string>{"Hey", ",", "you", "!"}));
}

TEST(AddedTokens, SingleWordLstripRstripAndNormalized) {
  // HF's own test (added_vocabulary.rs, options_use_cases), with a Lowercase normalizer.
  auto lower = make_normalizer(json::parse(R"({"type":"Lowercase"})"));
  std::vector<AddedToken> tokens = {
      {"my", 0, false, false, true, true, true},      {"name", 1, false, false, false, false, true},
      {"ony", 2, false, true, false, false, true},    {"[CLS]", 3, true, false, false, false, false},
      {"[SEP]", 4, true, false, false, false, false},
  };
  const AddedVocabulary vocab(tokens, lower.get());
  std::vector<Piece> pieces(1);
  pieces[0].text = "[CLS] My name is Anthony [SEP]";
  vocab.split(pieces, false);
  for (auto& p : pieces)
    if (p.id < 0) lower->normalize(p.text);
  vocab.split(pieces, true);
  std::vector<std::pair<std::string, int32_t>> got;
  for (const auto& p : pieces) got.emplace_back(p.text, p.id);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int32_t>>{
                     {"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}));

  // single_word: only between non-word characters; longest match wins; a dropped match is not rescanned.
  const AddedVocabulary masks(
      {{"<mask>", 7, false, true, false, false, false}, {"<mask>x", 8, false, false, false, false, false}},
      nullptr);
  std::vector<Piece> p2(1);
  p2[0].text = "<mask> a<mask> <mask>x <mask>,";
  masks.split(p2, false);
  got.clear();
  for (const auto& p : p2) got.emplace_back(p.text, p.id);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int32_t>>{
                     {"<mask>", 7}, {" a<mask> ", -1}, {"<mask>x", 8}, {" ", -1}, {"<mask>", 7}, {",", -1}}));
}

TEST(Normalizers, UnicodeFormsAndOthers) {
  EXPECT_EQ(unicode_normalize("e\u0301", UnicodeForm::NFC), "\u00e9");
  EXPECT_EQ(unicode_normalize("\u212b", UnicodeForm::NFC), "\u00c5");  // Angstrom sign → Å
  EXPECT_EQ(unicode_normalize("\u00e9", UnicodeForm::NFD), "e\u0301");
  EXPECT_EQ(unicode_normalize("\ufb01", UnicodeForm::NFKC), "fi");
  EXPECT_EQ(unicode_normalize("\ufb01", UnicodeForm::NFC), "\ufb01");
  // The NFC normalizer's fast path (inert ranges, cut before ASCII) equals plain utf8proc NFC for
  // every code point of the planes in use, alone, before combining marks, and after Hangul/ASCII.
  auto nfc = make_normalizer(json::parse(R"({"type":"NFC"})"));
  for (char32_t cp = 0x80; cp < 0x20000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string text = "a";
    append_utf8(text, cp);
    text += "\u0301x\u1100\u1161";
    append_utf8(text, cp);
    text += "\u11a8\u0308e";
    const std::string expected = unicode_normalize(text, UnicodeForm::NFC);
    nfc->normalize(text);
    ASSERT_EQ(text, expected) << "U+" << std::hex << static_cast<uint32_t>(cp);
    // After composition firsts of several scripts (a text the fast path may skip entirely).
    for (const char* first : {"e", "\u00c2", "\uac00", "\u1100", "\u0b92", "\u09c7", "\u0dd9", "\u30ab"}) {
      std::string pair = first;
      append_utf8(pair, cp);
      const std::string want = unicode_normalize(pair, UnicodeForm::NFC);
      nfc->normalize(pair);
      ASSERT_EQ(pair, want) << "U+" << std::hex << static_cast<uint32_t>(cp) << " after " << first;
    }
  }
  auto norm = [](const char* config, std::string text) {
    make_normalizer(json::parse(config))->normalize(text);
    return text;
  };
  EXPECT_EQ(norm(R"({"type":"NFC"})", "cafe\u0301 ok"), "caf\u00e9 ok");
  EXPECT_EQ(norm(R"({"type":"Lowercase"})", "İSTANBUL ΣΑΣ"), "i\u0307stanbul σασ");  // no final sigma, as HF
  EXPECT_EQ(norm(R"({"type":"Strip","strip_left":true,"strip_right":true})", " \u3000 a \u0085"), "a");
  EXPECT_EQ(norm(R"({"type":"Replace","pattern":{"Regex":" {2,}"},"content":"_"})", "a  b   c d"), "a_b_c d");
  EXPECT_EQ(
      norm(
          R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]})",
          "a b"),
      "▁a▁b");
  EXPECT_EQ(norm(R"({"type":"Prepend","prepend":"▁"})", ""), "");
}

TEST(Decoders, HfSemantics) {
  auto decode = [](const char* config, std::vector<std::string> tokens) {
    make_decoder(json::parse(config))->decode_chain(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  };
  EXPECT_EQ(decode(R"({"type":"ByteFallback"})",
                   {"<0xE2>", "<0x82>", "a", "<0xE2>", "<0x82>", "<0xAC>", "<0x+A>", "<0xzz>"}),
            "\uFFFD\uFFFDa\u20ac\n<0xzz>");
  EXPECT_EQ(
      decode(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always"})", {"▁▁a▁b", "▁c", "▁"}),
      "ab c ");
  EXPECT_EQ(decode(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never"})", {"▁▁a▁b", "▁c"}),
            "  a b c");
  EXPECT_EQ(decode(R"({"type":"Strip","content":" ","start":3,"stop":0})", {" a ", "   ", "  b"}), "a b");
  EXPECT_EQ(decode(R"({"type":"Strip","content":" ","start":1,"stop":1})", {" ", "  x  "}),
            " x ");  // HF panics on " "
  // Byte-level: bytes of all tokens joined, then repaired; "好" is outside the alphabet and kept.
  EXPECT_EQ(decode(R"({"type":"ByteLevel"})", {"Hello", "Ġw", "Ã", "©", "ĠâĤ", "好"}),
            "Hello w\u00e9 \uFFFD好");
}

// A SentencePiece-style BPE with byte fallback, built by hand.
std::string tiny_spm(bool byte_fallback, bool fuse_unk) {
  json vocab = {{"<unk>", 0}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = b + 1;
  }
  vocab["▁"] = 257;
  vocab["a"] = 258;
  vocab["b"] = 259;
  vocab["ab"] = 260;
  vocab["▁ab"] = 261;
  vocab["<s>"] = 262;
  json t = {
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                    {{"id", 262}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", json::parse(R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
                                    {"type":"Replace","pattern":{"String":" "},"content":"▁"}]})")},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       json::parse(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
          {"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[262],"tokens":["<s>"]}}})")},
      {"decoder",
       json::parse(
           R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},
          {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})")},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", fuse_unk},
        {"byte_fallback", byte_fallback},
        {"vocab", vocab},
        {"merges", json::array({"a b", "▁ ab"})}}},
  };
  return t.dump();
}

TEST(Bpe, ByteFallbackUnkAndMerges) {
  const Tokenizer t = Tokenizer::from_json(tiny_spm(true, true));
  // "ab é" → "▁ab▁é": a+b (rank 0), then ▁+ab (rank 1); é has no token: its bytes C3 A9.
  EXPECT_EQ(t.encode("ab é"), (std::vector<int32_t>{262, 261, 257, 0xC3 + 1, 0xA9 + 1}));
  EXPECT_EQ(t.encode("ab é", false), (std::vector<int32_t>{261, 257, 0xC3 + 1, 0xA9 + 1}));
  EXPECT_EQ(t.decode(t.encode("ab é")), "<s> ab é");  // Strip only cuts the text's first space
  EXPECT_EQ(t.decode(t.encode("ab é"), true), "ab é");
  EXPECT_TRUE(t.adds_bos());
  EXPECT_EQ(t.bos_token_id(), 262);  // no tokenizer_config.json: the template's first token

  const Tokenizer fused = Tokenizer::from_json(tiny_spm(false, true));
  EXPECT_EQ(fused.encode("abéé", false), (std::vector<int32_t>{261, 0}));
  const Tokenizer unfused = Tokenizer::from_json(tiny_spm(false, false));
  EXPECT_EQ(unfused.encode("abéé", false), (std::vector<int32_t>{261, 0, 0}));
  EXPECT_EQ(unfused.encode("é<s>b", false), (std::vector<int32_t>{257, 0, 262, 257, 259}));
}

TEST(Bpe, LeftmostMergeFirstAndIgnoreMerges) {
  auto make = [](bool ignore_merges) {
    json t = {{"added_tokens", json::array()},
              {"model",
               {{"type", "BPE"},
                {"ignore_merges", ignore_merges},
                {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"aa", 3}, {"abc", 4}, {"bc", 5}}},
                {"merges", json::array({json::array({"a", "a"}), json::array({"b", "c"})})}}}};
    return Tokenizer::from_json(t.dump());
  };
  const Tokenizer plain = make(false);
  EXPECT_EQ(plain.encode("aaa"), (std::vector<int32_t>{3, 0}));    // leftmost pair first
  EXPECT_EQ(plain.encode("abc"), (std::vector<int32_t>{0, 5}));    // "abc" unreachable by merges
  EXPECT_EQ(make(true).encode("abc"), (std::vector<int32_t>{4}));  // ignore_merges: whole word
  EXPECT_EQ(plain.decode({0, 5}), "a bc");                         // no decoder: joined by spaces
  EXPECT_EQ(plain.vocab_size(), 6);
  EXPECT_EQ(plain.encode("xyz"), std::vector<int32_t>{});  // no unk token: dropped as in HF
}

TEST(TokenizerErrors, FailLoudly) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { Tokenizer::load("/nonexistent/dir"); }).find("no tokenizer.json"),
            std::string::npos);
  EXPECT_NE(message([] {
              Tokenizer::from_json(R"({"model":{"type":"WordPiece","vocab":{}}})");
            }).find("not supported"),
            std::string::npos);
  EXPECT_NE(
      message([] {
        Tokenizer::from_json(
            R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Precompiled"}})");
      }).find("'Precompiled' is not supported"),
      std::string::npos);
  EXPECT_NE(message([] {
              Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}})");
            }).find("not in the vocab"),
            std::string::npos);
  EXPECT_NE(message([] { Tokenizer::from_json("{not json"); }).find("not valid JSON"), std::string::npos);
}

TEST(TokenizerConfig, SpecialTokensAndLlamaFlags) {
  const std::string spm = tiny_spm(true, true);
  // tokenizer_config.json names the tokens, as strings or objects.
  const Tokenizer t = Tokenizer::from_json(
      spm,
      R"({"bos_token": {"content": "<s>"}, "eos_token": "<unk>", "pad_token": null, "tokenizer_class": "X"})");
  EXPECT_EQ(t.bos_token_id(), 262);
  EXPECT_EQ(t.eos_token_id(), 0);
  EXPECT_EQ(t.pad_token_id(), std::nullopt);
  EXPECT_TRUE(t.adds_bos());
  EXPECT_FALSE(t.adds_eos());
  // LlamaTokenizerFast rebuilds the post-processor from add_bos_token / add_eos_token.
  const Tokenizer llama = Tokenizer::from_json(
      spm, R"({"bos_token": "<s>", "eos_token": "<unk>", "add_bos_token": false, "add_eos_token": true,
               "tokenizer_class": "LlamaTokenizerFast"})");
  EXPECT_FALSE(llama.adds_bos());
  EXPECT_TRUE(llama.adds_eos());
  EXPECT_EQ(llama.encode("ab"), (std::vector<int32_t>{261, 0}));
}

}  // namespace
}  // namespace ferry
