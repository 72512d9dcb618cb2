// Chat templates against jinja2: tools/chat_template_goldens.py rendered each template of
// tests/fixtures/chat_templates with transformers' settings for several conversations; ferry's
// renderer must produce the same text, byte for byte, raise where jinja2 raised, and report the
// same {% generation %} spans. Then: template loading, errors that name the line, and the
// attribution of output to messages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/utf8.h"
#include "jinja/pystr.h"
#include "jinja/template.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ferry {
namespace {

using nlohmann::ordered_json;

std::filesystem::path templates_dir() {
  return test::fixtures_dir() / "chat_templates";
}

ordered_json goldens() {
  static const ordered_json g = ordered_json::parse(test::read_file(templates_dir() / "goldens.json"));
  return g;
}

// strftime_now() formats local time, as Python's datetime.now() does; the goldens use UTC.
void use_utc() {
  setenv("TZ", "UTC", 1);
  tzset();
}

ChatTemplate load_fixture(const std::string& file, const ordered_json& special) {
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const auto& [k, v] : special.items()) tokens.emplace_back(k, v.get<std::string>());
  return ChatTemplate(test::read_file(templates_dir() / file), file, tokens);
}

std::string show(const ordered_json& c) {
  return c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>() +
         " / add_generation_prompt=" + (c["add_generation_prompt"].get<bool>() ? "true" : "false") +
         " / extra " + c["extra"].dump();
}

TEST(ChatTemplateGolden, MatchesJinja2ByteForByte) {
  use_utc();
  const ordered_json g = goldens();
  ASSERT_GT(g["cases"].size(), 100u);
  size_t rendered = 0, raised = 0;
  for (const auto& c : g["cases"]) {
    SCOPED_TRACE(show(c));
    const ChatTemplate t = load_fixture(c["template"], c["special_tokens"]);
    const jinja::Value messages = jinja::from_json(g["conversations"][c["conversation"].get<std::string>()]);
    ChatRenderOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    options.now = g["now"].get<int64_t>();
    for (const auto& [k, v] : c["extra"].items())
      options.extra_variables.emplace_back(k, jinja::from_json(v));
    if (c.contains("error")) {
      try {
        t.render(messages, options);
        ADD_FAILURE() << "jinja2 raised '" << c["error"].get<std::string>() << "' but ferry rendered";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
      }
      ++raised;
      continue;
    }
    const ChatRendering r = t.render(messages, options);
    EXPECT_EQ(r.text, c["text"].get<std::string>());
    // jinja2 reports character offsets; ferry byte offsets.
    std::vector<std::vector<int64_t>> spans;
    for (const auto& [b, e] : r.generation_spans)
      spans.push_back({jinja::py_len(std::string_view(r.text).substr(0, b)),
                       jinja::py_len(std::string_view(r.text).substr(0, e))});
    EXPECT_EQ(spans, c["generation_spans"].get<std::vector<std::vector<int64_t>>>());
    ++rendered;
  }
  EXPECT_GT(rendered, 90u);
  EXPECT_GT(raised, 5u);
}

// Small templates that pin the interpreter's semantics to jinja2's: scoping, filters, tests, Python
// printing, whitespace control; jinja2's errors are errors here too, and what ferry does not
// implement is refused with an error saying so.
TEST(JinjaSnippets, MatchJinja2) {
  const ordered_json g = goldens();
  ASSERT_GT(g["snippets"].size(), 80u);
  jinja::RenderInput input;
  for (const auto& [k, v] : g["snippet_variables"].items())
    input.variables.emplace_back(k, jinja::from_json(v));
  for (const auto& snippet : g["snippets"]) {
    const std::string source = snippet["template"];
    SCOPED_TRACE(source);
    std::string text, error;
    try {
      text = jinja::Template::parse(source, "snippet").render(input).text;
    } catch (const Error& e) {
      error = e.what();
    }
    if (snippet["ferry_unsupported"].get<bool>()) {
      EXPECT_NE(error.find("not supported"), std::string::npos) << error;
    } else if (snippet.contains("error")) {
      EXPECT_FALSE(error.empty()) << "jinja2 raised " << snippet["error"] << " but ferry rendered: " << text;
    } else {
      EXPECT_EQ(error, "");
      EXPECT_EQ(text, snippet["text"].get<std::string>());
    }
  }
}

// The npm fixtures' tokenizer_config.json files carry the same templates as our copies.
TEST(ChatTemplateGolden, FixtureCopiesMatchNpmPackages) {
  for (const auto& [copy, package] :
       {std::pair<std::string, std::string>{"qwen3.jinja", "qwen3"}, {"llama3-npm.jinja", "llama3"}}) {
    const auto dir = test::fixtures_dir() / "tokenizers" / package;
    if (!std::filesystem::exists(dir / "tokenizer_config.json")) {
      ADD_FAILURE() << "tokenizer fixture missing: " << dir << "; run scripts/fetch_tokenizer_fixtures.sh";
      continue;
    }
    const auto loaded = ChatTemplate::load(dir);
    ASSERT_TRUE(loaded.has_value()) << package;
    EXPECT_EQ(loaded->source(), test::read_file(templates_dir() / copy)) << package;
    const auto config = nlohmann::json::parse(test::read_file(dir / "tokenizer_config.json"));
    const auto tokens = ChatTemplate::special_tokens_from_config(config);
    EXPECT_EQ(loaded->special_tokens(), tokens);
  }
  const auto mistral = test::fixtures_dir() / "tokenizers" / "llama2";
  if (std::filesystem::exists(mistral / "tokenizer_config.json")) {
    EXPECT_FALSE(ChatTemplate::load(mistral).has_value());
  }
}

TEST(ChatTemplateLoad, NamedTemplatesUseDefault) {
  nlohmann::json config = {
      {"chat_template", nlohmann::json::array({{{"name", "tool_use"}, {"template", "T"}},
                                               {{"name", "default"}, {"template", "D"}}})}};
  EXPECT_EQ(ChatTemplate::template_from_config(config, "cfg").value(), "D");
  config["chat_template"].erase(1);
  try {
    ChatTemplate::template_from_config(config, "cfg");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tool_use"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ChatTemplate::template_from_config(nlohmann::json::object(), "cfg").has_value());
  EXPECT_FALSE(ChatTemplate::template_from_config({{"chat_template", nullptr}}, "cfg").has_value());
}

TEST(ChatTemplateLoad, JinjaFileTakesPrecedenceAndSpecialTokensComeFromConfig) {
  test::ScratchDir dir("chat-load");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "from config", "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>", "pad_token": null, "additional_special_tokens": ["<a>", "<b>"]})";
  auto t = ChatTemplate::load(dir.path());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->source(), "from config");
  const std::vector<std::pair<std::string, std::string>> expected = {{"bos_token", "<s>"},
                                                                     {"eos_token", "</s>"},
                                                                     {"additional_special_tokens", "<a>"},
                                                                     {"additional_special_tokens", "<b>"}};
  EXPECT_EQ(t->special_tokens(), expected);
  std::ofstream(dir / "chat_template.jinja")
      << "{{ bos_token }}{{ additional_special_tokens|join(',') }}{{ pad_token is defined }}\n";
  t = ChatTemplate::load(dir.path());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->apply(jinja::Value::list(), false), "<s><a>,<b>False");
}

std::string error_of(const std::string& source, const std::string& messages_json = "[]") {
  try {
    ChatTemplate t(source, "t.jinja", {});
    t.apply(jinja::from_json(ordered_json::parse(messages_json)), false);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplateErrors, NameTheLineAndTheConstruct) {
  EXPECT_NE(error_of("a\n{% include 'x.jinja' %}").find("t.jinja:2: the {% include %} tag is not supported"),
            std::string::npos)
      << error_of("a\n{% include 'x.jinja' %}");
  EXPECT_NE(error_of("{{ x | nosuchfilter }}").find("t.jinja:1: no filter named 'nosuchfilter'"),
            std::string::npos);
  EXPECT_NE(error_of("\n\n{{ 'a' | safe }}").find("t.jinja:3: the 'safe' filter is not supported"),
            std::string::npos);
  EXPECT_NE(
      error_of("{% for m in messages %}\n{{ m.content.format(1) }}{% endfor %}", R"([{"content": "{}"}])")
          .find("t.jinja:2: str.format() is not supported"),
      std::string::npos);
  EXPECT_NE(error_of("{{ messages[0].role.upper() }}", "[]").find("'list object' has no element 0"),
            std::string::npos)
      << error_of("{{ messages[0].role.upper() }}", "[]");
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str (not \"int\") to str"),
            std::string::npos);
  EXPECT_NE(error_of("{% if x %}").find("unexpected end of template"), std::string::npos);
  EXPECT_NE(
      error_of("{{ raise_exception('bad roles') }}").find("the template raised an exception: bad roles"),
      std::string::npos);
  EXPECT_NE(error_of("{% set x = [] %}{{ x.append(1) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{% raw %}{{ x }}{% endraw %}").find("raw"), std::string::npos);
  EXPECT_NE(error_of("{{ 'é'.upper() }}").find("non-ASCII"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside of a loop"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = 1 %}{% set ns.x = 2 %}").find("non-namespace"), std::string::npos);
  EXPECT_NE(
      error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("maximum recursion depth"),
      std::string::npos);
}

// A digit-only part of an attribute path is an item index, as in jinja2; one beyond 64 bits is
// refused with the template's line, not a crash.
TEST(ChatTemplateErrors, AttributeIndexBeyond64BitsIsAnError) {
  const std::string messages = R"([{"role": "user", "content": "hi"}])";
  const std::string error = error_of("\n{{ messages|map(attribute='99999999999999999999')|list }}", messages);
  EXPECT_NE(error.find("t.jinja:2:"), std::string::npos) << error;
  EXPECT_NE(error.find("99999999999999999999"), std::string::npos) << error;
  EXPECT_EQ(error_of("{{ messages|map(attribute='0')|list }}", R"([["a", "b"]])"), "");
}

// Nesting that would overflow the stack while parsing, evaluating or destroying the syntax tree
// is refused with the template's name, line and column; the limit is far above real templates.
TEST(ChatTemplateErrors, DeepNestingIsRefusedNotACrash) {
  auto parse = [](const std::string& source) { jinja::Template::parse(source, "deep.jinja"); };
  const std::string parens = "{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}";
  EXPECT_TRUE(test::throws_with([&] { parse(parens); }, {"deep.jinja:1:", "nested deeper than 256 levels"}));
  std::string chain = "x\n{{ a";  // a.b.b.b...: built in a loop, yet as deep as the parentheses
  for (int i = 0; i < 100000; ++i) chain += ".b";
  EXPECT_TRUE(test::throws_with([&] { parse(chain + " }}"); }, {"deep.jinja:2:", "nested deeper"}));
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  EXPECT_TRUE(test::throws_with([&] { parse(sum + " }}"); }, {"nested deeper"}));
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += " | trim";
  EXPECT_TRUE(test::throws_with([&] { parse(filters + " }}"); }, {"nested deeper"}));
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_TRUE(test::throws_with([&] { parse(nots + "x }}"); }, {"nested deeper"}));
  std::string blocks;
  for (int i = 0; i < 10000; ++i) blocks += "{% if x %}";
  EXPECT_TRUE(test::throws_with([&] { parse(blocks); }, {"nested deeper"}));
  // The column: the 257th '(' on line 3 after two spaces and '{{ '.
  EXPECT_TRUE(test::throws_with(
      [&] { parse("\n\n  {{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"); },
      {"deep.jinja:3:262:"}));

  // Up to the limit, nesting renders as jinja2 renders it.
  const std::string fine = "{{ " + std::string(100, '(') + "2" + std::string(100, ')') + " * 3 }}";
  EXPECT_EQ(jinja::Template::parse(fine, "ok.jinja").render({}).text, "6");
}

TEST(ChatTemplateAttribution, OutputIsAttributedToTheMessageBeingVisited) {
  const ChatTemplate t(test::read_file(templates_dir() / "qwen2.5-instruct.jinja"), "qwen2.5",
                       {{"eos_token", "<|im_end|>"}});
  const auto messages = jinja::from_json(ordered_json::parse(R"([
    {"role": "system", "content": "S"}, {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "U2"}, {"role": "assistant", "content": "A2"}])"));
  const ChatRendering r = t.render(messages);
  ASSERT_EQ(r.message_ranges.size(), 5u);
  // The system message is written before the loop (from messages[0]) and again never: no range.
  EXPECT_TRUE(r.message_ranges[0].empty());
  auto text_of = [&](size_t i) {
    std::string s;
    for (const auto& [b, e] : r.message_ranges[i]) s += r.text.substr(b, e - b);
    return s;
  };
  EXPECT_EQ(text_of(1), "<|im_start|>user\nU1<|im_end|>\n");
  EXPECT_EQ(text_of(2), "<|im_start|>assistant\nA1<|im_end|>\n");
  EXPECT_EQ(text_of(4), "<|im_start|>assistant\nA2<|im_end|>\n");
  EXPECT_EQ(r.message_ranges[4].back().second, r.text.size());
}

TEST(Jinja, PythonFloatRepr) {
  EXPECT_EQ(jinja::py_float_repr(1.0), "1.0");
  EXPECT_EQ(jinja::py_float_repr(0.1), "0.1");
  EXPECT_EQ(jinja::py_float_repr(1e16), "1e+16");
  EXPECT_EQ(jinja::py_float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(jinja::py_float_repr(1e-5), "1e-05");
  EXPECT_EQ(jinja::py_float_repr(0.00012), "0.00012");
  EXPECT_EQ(jinja::py_float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(jinja::py_float_repr(1e300 * 10), "1e+301");
}

// Python's str.isspace is Unicode's White_Space and the information separators U+001C..U+001F
// (what Python 3 answers for each code point below).
TEST(Jinja, PythonIsspaceIsWhiteSpaceAndTheInformationSeparators) {
  for (char32_t c : {U'\t', U'\n', U'\x0b', U'\x0c', U'\r', U' ', U'\x85', U'\xa0', U'\u1680', U'\u2000',
                     U'\u200a', U'\u2028', U'\u2029', U'\u202f', U'\u205f', U'\u3000'}) {
    EXPECT_TRUE(jinja::py_isspace(c)) << static_cast<uint32_t>(c);
    EXPECT_TRUE(is_unicode_white_space(c)) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'\x1c', U'\x1d', U'\x1e', U'\x1f'}) {
    EXPECT_TRUE(jinja::py_isspace(c)) << static_cast<uint32_t>(c);
    EXPECT_FALSE(is_unicode_white_space(c)) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'a', U'\x1b', U'\u200b', U'\u180e', U'\ufeff'}) {
    EXPECT_FALSE(jinja::py_isspace(c)) << static_cast<uint32_t>(c);
    EXPECT_FALSE(is_unicode_white_space(c)) << static_cast<uint32_t>(c);
  }
}

}  // namespace
}  // namespace ferry
