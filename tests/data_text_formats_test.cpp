// Text data formats → documents: the character→token mask rule at boundaries, the assistant spans
// chat templates give (Llama 3/3.1, Qwen 2.5/3, Mistral, {% generation %}), every record format
// through files with auto-detection, and malformed records reported with file:line.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "data/chat_text.h"
#include "data/text_dataset.h"
#include "data/training_text.h"
#include "data_test_tokenizer.h"
#include "test_util.h"

namespace ferry {
namespace {

using nlohmann::ordered_json;

std::string fixture_template(const std::string& name) {
  return test::read_file(test::fixtures_dir() / "chat_templates" / name);
}

const Tokenizer& tiny() {
  static const Tokenizer t = Tokenizer::from_json(
      test::tiny_tokenizer_json(), R"({"eos_token": "<|end_of_text|>", "bos_token": "<|begin_of_text|>"})");
  return t;
}

// The trained stretches of a document, each decoded to text.
std::vector<std::string> trained_texts(const Document& doc, const Tokenizer& tokenizer) {
  std::vector<std::string> out;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= doc.labels.size(); ++i) {
    if (i < doc.labels.size() && doc.labels[i] != kIgnoreIndex) {
      EXPECT_EQ(doc.labels[i], doc.input_ids[i]);
      run.push_back(doc.input_ids[i]);
    } else if (!run.empty()) {
      out.push_back(tokenizer.decode(run));
      run.clear();
    }
  }
  return out;
}

std::vector<std::string> range_texts(const TrainingText& t) {
  std::vector<std::string> out;
  for (const auto& r : t.trained) out.push_back(t.text.substr(r.begin, r.end - r.begin));
  return out;
}

// An encoder with hand-made tokens: each token is a byte range given by the test.
class FakeEncoder : public TextEncoder {
 public:
  std::vector<int32_t> ids;
  std::vector<ByteRange> ranges;
  bool aligned = true;
  mutable std::vector<std::string> pieces;  // texts encoded piece by piece
  bool encode(std::string_view text, bool, std::vector<int32_t>* out_ids,
              std::vector<ByteRange>* out_ranges) const override {
    if (!out_ranges) {
      pieces.emplace_back(text);
      out_ids->assign(1, static_cast<int32_t>(text.size()));  // one token per piece, id = its length
      return true;
    }
    *out_ids = ids;
    *out_ranges = ranges;
    return aligned;
  }
  std::optional<int32_t> eos_token_id() const override { return 99; }
  bool adds_eos() const override { return false; }
  std::vector<int32_t> special_prefix() const override { return {}; }
  std::vector<int32_t> special_suffix() const override { return {}; }
};

TEST(TrainingText, TokensStraddlingABoundaryAreTrained) {
  // text: "abcdefgh"; trained range [3, 6) = "def"; tokens: [0,2) [2,4) [4,5) [5,7) [7,8), and an
  // empty-range token at 0 (bos).
  FakeEncoder enc;
  enc.ids = {1, 10, 11, 12, 13, 14};
  enc.ranges = {{0, 0}, {0, 2}, {2, 4}, {4, 5}, {5, 7}, {7, 8}};
  TrainingText t{"abcdefgh", {{3, 6}}, {false}, true};
  Document doc = tokenize_training_text(t, enc, nullptr);
  EXPECT_EQ(doc.input_ids, (std::vector<int32_t>{1, 10, 11, 12, 13, 14}));
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{-100, -100, 11, 12, 13, -100}));
  // With eos after the range: it follows the range's last token ([5,7)).
  t.eos_after = {true};
  TokenizeStats stats;
  doc = tokenize_training_text(t, enc, &stats);
  EXPECT_EQ(doc.input_ids, (std::vector<int32_t>{1, 10, 11, 12, 13, 99, 14}));
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{-100, -100, 11, 12, 13, 99, -100}));
  EXPECT_EQ(stats.eos_inserted, 1);
  EXPECT_EQ(stats.trained_tokens, 4);
  // A range that starts exactly at a token boundary leaves the previous token masked.
  t = TrainingText{"abcdefgh", {{4, 5}}, {false}, true};
  doc = tokenize_training_text(t, enc, nullptr);
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{-100, -100, -100, 12, -100, -100}));
  // An empty-range token is trained when its position is inside a range.
  t = TrainingText{"abcdefgh", {{0, 1}}, {false}, true};
  doc = tokenize_training_text(t, enc, nullptr);
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{1, 10, -100, -100, -100, -100}));
}

TEST(TrainingText, UnalignedTextIsEncodedRangeByRange) {
  FakeEncoder enc;
  enc.aligned = false;
  enc.ids = {7};
  enc.ranges = {{0, 0}};
  TrainingText t{"promptANSWERtail", {{6, 12}}, {true}, false};
  TokenizeStats stats;
  const Document doc = tokenize_training_text(t, enc, &stats);
  EXPECT_EQ(enc.pieces, (std::vector<std::string>{"prompt", "ANSWER", "tail"}));
  EXPECT_EQ(doc.input_ids, (std::vector<int32_t>{6, 6, 99, 4}));
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{-100, 6, 99, -100}));
  EXPECT_EQ(stats.encoded_by_range, 1);
}

TEST(TrainingText, RealTokenizerMergesAcrossABoundary) {
  // " the cat": the tokenizer makes "Ġthe" and "Ġcat". A range starting inside "Ġthe" (at 't')
  // trains the whole token; one ending inside "Ġcat" trains it too.
  TokenizerTextEncoder enc(tiny());
  std::vector<int32_t> ids;
  std::vector<ByteRange> ranges;
  ASSERT_TRUE(enc.encode(" the cat", false, &ids, &ranges));
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ranges, (std::vector<ByteRange>{{0, 4}, {4, 8}}));
  TrainingText t{" the cat", {{1, 2}}, {false}, false};
  Document doc = tokenize_training_text(t, enc, nullptr);
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{ids[0], -100}));
  t.trained = {{5, 6}};
  doc = tokenize_training_text(t, enc, nullptr);
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{-100, ids[1]}));
  // add_special_tokens: bos first, with an empty range at 0.
  ASSERT_TRUE(enc.encode(" the cat", true, &ids, &ranges));
  EXPECT_EQ(ids.front(), 300);
  EXPECT_EQ(ranges.front(), (ByteRange{0, 0}));
}

TEST(TokenAlignment, ByteLevelSentencePieceAndFailure) {
  std::vector<ByteRange> r;
  // Byte-level: "Ġhi" is " hi"; "Ċ" is "\n"; an added token as written.
  EXPECT_TRUE(align_tokens(" hi\n<|im_end|>", {1, 2, 3}, {"Ġhi", "Ċ", "<|im_end|>"}, &r));
  EXPECT_EQ(r, (std::vector<ByteRange>{{0, 3}, {3, 4}, {4, 14}}));
  // SentencePiece: the normalizer's prepended ▁ covers no byte; <0x0A> is a byte.
  EXPECT_TRUE(align_tokens("hi there\n</s>", {1, 2, 3, 4}, {"▁hi", "▁there", "<0x0A>", "</s>"}, &r));
  EXPECT_EQ(r, (std::vector<ByteRange>{{0, 2}, {2, 8}, {8, 9}, {9, 13}}));
  EXPECT_TRUE(align_tokens("[/INST]a", {1, 2, 3}, {"[/INST]", "▁", "a"}, &r));
  EXPECT_EQ(r, (std::vector<ByteRange>{{0, 7}, {7, 7}, {7, 8}}));
  // A normalizer that recomposed "e\u0301" into "é": the tokens do not spell the text.
  EXPECT_FALSE(align_tokens("cafe\xCC\x81", {1, 2}, {"caf", "Ã©"}, &r));
  EXPECT_FALSE(align_tokens("abc", {1}, {"ab"}, &r));  // text left over
}

struct ChatCase {
  std::string template_file;
  std::vector<std::pair<std::string, std::string>> special_tokens;
  std::vector<std::string> stops;
};

TrainingText chat(const ChatCase& c, const std::string& messages_json, bool train_on_prompt = false,
                  std::vector<std::pair<std::string, jinja::Value>> extra = {}) {
  const ChatTemplate tpl(fixture_template(c.template_file), c.template_file, c.special_tokens);
  ChatTextOptions o;
  o.stop_strings = c.stops;
  o.train_on_prompt = train_on_prompt;
  o.render.extra_variables = std::move(extra);
  TrainingText t = chat_training_text(tpl, jinja::from_json(ordered_json::parse(messages_json)), o);
  // The text is exactly what the template renders.
  EXPECT_EQ(t.text, tpl.apply(jinja::from_json(ordered_json::parse(messages_json)), false));
  return t;
}

const char* kTwoTurns = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye now."}])";

TEST(ChatText, Qwen25TrainsContentAndImEnd) {
  const ChatCase qwen{
      "qwen2.5-instruct.jinja", {{"eos_token", "<|im_end|>"}}, {"<|im_end|>", "<|endoftext|>"}};
  const TrainingText t = chat(qwen, kTwoTurns);
  EXPECT_EQ(range_texts(t), (std::vector<std::string>{"Hello!<|im_end|>", "Bye now.<|im_end|>"}));
  EXPECT_EQ(t.eos_after, (std::vector<bool>{false, false}));
  EXPECT_FALSE(t.add_special_tokens);
  // train_on_prompt: one range, the whole text.
  const TrainingText all = chat(qwen, kTwoTurns, true);
  EXPECT_EQ(all.trained, (std::vector<ByteRange>{{0, all.text.size()}}));
}

TEST(ChatText, Llama31TrainsContentAndEotId) {
  const ChatCase llama{"llama-3.1-instruct.jinja",
                       {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}},
                       {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}};
  const TrainingText t = chat(llama, kTwoTurns);
  EXPECT_EQ(range_texts(t), (std::vector<std::string>{"Hello!<|eot_id|>", "Bye now.<|eot_id|>"}));
  // The template trims content: what is trained is what it wrote.
  const TrainingText padded =
      chat(llama, R"([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "  A  \n"}])");
  EXPECT_EQ(range_texts(padded), (std::vector<std::string>{"A<|eot_id|>"}));
}

TEST(ChatText, Llama3NpmTemplateWithoutStopStringGetsEos) {
  // The base Llama-3 tokenizer's eos is <|end_of_text|>, which its template never writes.
  const ChatCase llama{"llama3-npm.jinja",
                       {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}},
                       {"<|end_of_text|>"}};
  const TrainingText t = chat(llama, kTwoTurns);
  EXPECT_EQ(range_texts(t), (std::vector<std::string>{"Hello!<|eot_id|>", "Bye now.<|eot_id|>"}));
  EXPECT_EQ(t.eos_after, (std::vector<bool>{true, true}));
}

TEST(ChatText, Qwen3ThinkBlocks) {
  const ChatCase qwen3{"qwen3.jinja",
                       {{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}},
                       {"<|im_end|>", "<|endoftext|>"}};
  const char* reasoning = R"([{"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "<think>\nR1\n</think>\n\nA1"}, {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "A2", "reasoning_content": "R2"}])";
  TrainingText t = chat(qwen3, reasoning);
  // Earlier turns lose their reasoning; the last one keeps it.
  EXPECT_EQ(range_texts(t),
            (std::vector<std::string>{"A1<|im_end|>", "<think>\nR2\n</think>\n\nA2<|im_end|>"}));
  // enable_thinking=False: the empty think block belongs to the generation prompt.
  t = chat(qwen3, R"([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}])", false,
           {{"enable_thinking", jinja::Value(false)}});
  EXPECT_EQ(range_texts(t), (std::vector<std::string>{"A<|im_end|>"}));
  EXPECT_NE(t.text.find("<think>\n\n</think>\n\nA"), std::string::npos);
  t = chat(qwen3, R"([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}])");
  EXPECT_EQ(range_texts(t), (std::vector<std::string>{"<think>\n\n</think>\n\nA<|im_end|>"}));
}

TEST(ChatText, MistralTemplates) {
  const std::vector<std::pair<std::string, std::string>> tokens = {{"bos_token", "<s>"},
                                                                   {"eos_token", "</s>"}};
  const ChatCase v02{"mistral-7b-instruct-v0.2.jinja", tokens, {"</s>"}};
  const char* turns = R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye now."}])";
  EXPECT_EQ(range_texts(chat(v02, turns)), (std::vector<std::string>{"Hello!</s>", "Bye now.</s>"}));
  const ChatCase system{"mistral-instruct-system.jinja", tokens, {"</s>"}};
  EXPECT_EQ(range_texts(chat(system, kTwoTurns)), (std::vector<std::string>{" Hello!</s>", " Bye now.</s>"}));
  // The v0.2 template refuses a system message.
  try {
    chat(v02, kTwoTurns);
    FAIL() << "expected the template's exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos) << e.what();
  }
}

TEST(ChatText, GenerationTagsDecide) {
  const ChatCase tags{"generation-tags.jinja", {{"eos_token", "<|im_end|>"}}, {"<|im_end|>"}};
  EXPECT_EQ(range_texts(chat(tags, kTwoTurns)),
            (std::vector<std::string>{"Hello!<|im_end|>", "Bye now.<|im_end|>"}));
}

// ---- files ----

class DataFiles : public ::testing::Test {
 protected:
  test::ScratchDir dir{"data-formats"};
  std::filesystem::path write(const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return dir / name;
  }
  ChatTemplate qwen{fixture_template("qwen2.5-instruct.jinja"), "qwen2.5", {{"eos_token", "<|im_end|>"}}};
  TokenizerTextEncoder encoder{tiny()};
  TextDataOptions options() {
    TextDataOptions o;
    o.encoder = &encoder;
    o.chat_template = &qwen;
    o.chat.stop_strings = {"<|im_end|>"};
    o.vocab_size = 320;
    return o;
  }
  std::string error_of(const std::vector<std::filesystem::path>& paths, const TextDataOptions& o) {
    try {
      load_text_documents(paths, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(DataFiles, EveryFormatAutoDetected) {
  const auto alpaca = write("alpaca.jsonl", R"({"instruction": "Add", "input": "2 and 2", "output": "4"}
{"instruction": "Say hi", "output": "hi"}
)");
  const auto sharegpt = write("sharegpt.json", R"([
  {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]},
  {"system": "Be brief.", "conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"},
                                            {"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}]}
])");
  const auto messages =
      write("messages.jsonl",
            R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})");
  const auto pc = write("pc.jsonl", R"({"prompt": "The sky is", "completion": " blue."}
{"prompt": [{"role": "user", "content": "Sky?"}], "completion": [{"role": "assistant", "content": "Blue."}]}
)");
  const auto text = write("text.jsonl", "{\"text\": \"the cat\"}\n\n");
  const auto txt = write("notes.txt", "A plain\n\ntext file.\n");
  const auto tokens = write("tokens.jsonl", R"({"input_ids": [1, 2, 3], "labels": [-100, 2, 3]})");

  TextDataStats stats;
  const auto docs =
      load_text_documents({alpaca, sharegpt, messages, pc, text, txt, tokens}, options(), &stats);
  ASSERT_EQ(docs.size(), 10u);
  EXPECT_EQ(stats.records_by_format, (std::map<std::string, int64_t>{{"alpaca", 2},
                                                                     {"sharegpt", 2},
                                                                     {"messages", 1},
                                                                     {"prompt_completion", 2},
                                                                     {"text", 2},
                                                                     {"tokens", 1}}));
  const Tokenizer& t = tiny();
  EXPECT_EQ(trained_texts(docs[0], t), (std::vector<std::string>{"4<|im_end|>"}));
  EXPECT_NE(t.decode(docs[0].input_ids).find("<|im_start|>user\nAdd\n2 and 2<|im_end|>"), std::string::npos);
  EXPECT_EQ(trained_texts(docs[1], t), (std::vector<std::string>{"hi<|im_end|>"}));
  EXPECT_EQ(trained_texts(docs[2], t), (std::vector<std::string>{"Hello!<|im_end|>"}));
  EXPECT_EQ(trained_texts(docs[3], t), (std::vector<std::string>{"A<|im_end|>", "A2<|im_end|>"}));
  EXPECT_NE(t.decode(docs[3].input_ids).find("<|im_start|>system\nBe brief.<|im_end|>"), std::string::npos);
  EXPECT_EQ(trained_texts(docs[4], t), (std::vector<std::string>{"Yo<|im_end|>"}));
  // Plain prompt/completion: bos, prompt masked, completion + eos trained.
  EXPECT_EQ(docs[5].input_ids.front(), 300);
  EXPECT_EQ(t.decode(docs[5].input_ids), "<|begin_of_text|>The sky is blue.<|end_of_text|>");
  EXPECT_EQ(trained_texts(docs[5], t), (std::vector<std::string>{" blue.<|end_of_text|>"}));
  // Conversational prompt/completion: only the completion's assistant message is trained.
  EXPECT_EQ(trained_texts(docs[6], t), (std::vector<std::string>{"Blue.<|im_end|>"}));
  // Text: everything, bos and eos.
  EXPECT_EQ(trained_texts(docs[7], t), (std::vector<std::string>{"<|begin_of_text|>the cat<|end_of_text|>"}));
  EXPECT_EQ(trained_texts(docs[8], t),
            (std::vector<std::string>{"<|begin_of_text|>A plain\n\ntext file.\n<|end_of_text|>"}));
  EXPECT_EQ(docs[9].input_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(docs[9].labels, (std::vector<int32_t>{-100, 2, 3}));
  EXPECT_EQ(stats.documents, 10);
  EXPECT_EQ(stats.skipped_malformed, 0);
  // One encode per text record (the tokens are aligned, never re-encoded range by range).
  EXPECT_EQ(encoder.calls(), 9);
  EXPECT_EQ(stats.encoded_by_range, 0);
}

TEST_F(DataFiles, AlpacaWithoutTemplateUsesThePlainPrompt) {
  const auto alpaca = write("a.jsonl", R"({"instruction": "Add", "input": "2 and 2", "output": "4"}
{"instruction": "Say hi", "input": "", "output": "hi"})");
  TextDataOptions o = options();
  o.chat_template = nullptr;
  const auto docs = load_text_documents({alpaca}, o);
  ASSERT_EQ(docs.size(), 2u);
  const Tokenizer& t = tiny();
  EXPECT_EQ(t.decode(docs[0].input_ids),
            "<|begin_of_text|>Below is an instruction that describes a task, paired with an input that "
            "provides further "
            "context. Write a response that appropriately completes the request.\n\n### "
            "Instruction:\nAdd\n\n### Input:\n2 "
            "and 2\n\n### Response:\n4<|end_of_text|>");
  EXPECT_EQ(trained_texts(docs[0], t), (std::vector<std::string>{"4<|end_of_text|>"}));
  EXPECT_NE(t.decode(docs[1].input_ids).find("request.\n\n### Instruction:\nSay hi\n\n### Response:\nhi"),
            std::string::npos);
  // Chat formats need a template.
  const auto m =
      write("m.jsonl",
            R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})");
  EXPECT_NE(error_of({m}, o).find("m.jsonl:1: messages records are rendered with the model's chat template"),
            std::string::npos)
      << error_of({m}, o);
}

TEST_F(DataFiles, TrainOnPromptTrainsEverything) {
  const auto m =
      write("m.jsonl",
            R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})");
  TextDataOptions o = options();
  o.train_on_prompt = true;
  const auto docs = load_text_documents({m}, o);
  for (size_t i = 0; i < docs[0].labels.size(); ++i) EXPECT_EQ(docs[0].labels[i], docs[0].input_ids[i]);
}

TEST_F(DataFiles, MalformedRecordsNameFileAndLine) {
  const auto bad =
      write("bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": 3}\n{not json\n{\"text\": \"fine\"}\n");
  const std::string e = error_of({bad}, options());
  EXPECT_NE(e.find("bad.jsonl:3: 'text' is 3 (number), not a string"), std::string::npos) << e;
  TextDataOptions o = options();
  o.skip_malformed = true;
  TextDataStats stats;
  const auto docs = load_text_documents({bad}, o, &stats);
  EXPECT_EQ(docs.size(), 2u);
  EXPECT_EQ(stats.skipped_malformed, 2);
  EXPECT_EQ(stats.records, 4);

  const auto arr = write(
      "arr.json", "[\n {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]},\n {\"messages\": []}\n]");
  EXPECT_NE(error_of({arr}, options()).find("arr.json:2: no assistant message"), std::string::npos)
      << error_of({arr}, options());
  const auto sg = write("sg.jsonl", R"({"conversations": [{"from": "bot", "value": "x"}]})");
  EXPECT_NE(error_of({sg}, options()).find("sg.jsonl:1: 'conversations'[0] is from 'bot'"),
            std::string::npos);
  // A template that refuses the conversation: malformed, with the template's message.
  ChatTemplate mistral(fixture_template("mistral-7b-instruct-v0.2.jinja"), "mistral",
                       {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  o = options();
  o.chat_template = &mistral;
  o.chat.stop_strings = {"</s>"};
  const auto sys = write(
      "sys.jsonl",
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]})");
  EXPECT_NE(error_of({sys}, o).find("sys.jsonl:1: [jinja] mistral:1: the template raised an exception: "
                                    "Conversation roles must alternate"),
            std::string::npos)
      << error_of({sys}, o);
  const auto unknown = write("u.jsonl", R"({"question": "?"})");
  EXPECT_NE(error_of({unknown}, options()).find("u.jsonl:1: cannot tell the data format"), std::string::npos);
  const auto txt = write("bad.txt", "line one\nline \xff two\n");
  EXPECT_NE(error_of({txt}, options()).find("bad.txt:2: not valid UTF-8"), std::string::npos)
      << error_of({txt}, options());
  const auto truncated = write("t.json", "[{\"text\": \"a\"},\n");
  EXPECT_NE(error_of({truncated}, options()).find("not closed"), std::string::npos);
}

TEST_F(DataFiles, ExplicitFormatAndVocabularyCheck) {
  const auto text = write("t.jsonl", R"({"text": "hello"})");
  TextDataOptions o = options();
  o.format = DataFormat::Alpaca;
  EXPECT_NE(error_of({text}, o).find("t.jsonl:1: no 'instruction'"), std::string::npos)
      << error_of({text}, o);
  o = options();
  o.vocab_size = 200;  // the tokenizer's bos is 300
  EXPECT_NE(error_of({text}, o).find("outside the model's vocabulary"), std::string::npos);
  EXPECT_EQ(parse_data_format("sharegpt"), DataFormat::ShareGpt);
  EXPECT_FALSE(parse_data_format("chatml").has_value());
}

}  // namespace
}  // namespace ferry

// ---- the real tokenizers (npm fixtures): tokens align with the text and masks are exact ----

namespace ferry {
namespace {

struct RealCase {
  const char* tokenizer;
  const char* template_file;
  std::vector<std::string> stops;
  std::vector<std::string> expected;  // the trained stretches, decoded
};

TEST(RealTokenizers, ChatMasksAlignExactly) {
  const char* conversation =
      R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there, what's 2+2?"},
    {"role": "assistant", "content": "It's 4. Ünïcødé 😀 too."}, {"role": "user", "content": "\n  And  3+3?"},
    {"role": "assistant", "content": "  6, with spaces.\n"}])";
  const char* no_system = R"([{"role": "user", "content": "Hi there, what's 2+2?"},
    {"role": "assistant", "content": "It's 4. Ünïcødé 😀 too."}, {"role": "user", "content": "\n  And  3+3?"},
    {"role": "assistant", "content": "  6, with spaces.\n"}])";
  const std::vector<RealCase> cases = {
      {"qwen3",
       "qwen3.jinja",
       {"<|im_end|>", "<|endoftext|>"},
       {"It's 4. Ünïcødé 😀 too.<|im_end|>", "<think>\n\n</think>\n\n  6, with spaces.\n<|im_end|>"}},
      {"qwen3",
       "qwen2.5-instruct.jinja",
       {"<|im_end|>"},
       {"It's 4. Ünïcødé 😀 too.<|im_end|>", "  6, with spaces.\n<|im_end|>"}},
      {"llama3",
       "llama-3.1-instruct.jinja",
       {"<|eot_id|>"},
       {"It's 4. Ünïcødé 😀 too.<|eot_id|>", "6, with spaces.<|eot_id|>"}},
      {"llama2",
       "mistral-instruct-system.jinja",
       {"</s>"},
       {" It's 4. Ünïcødé 😀 too.</s>", "   6, with spaces.\n</s>"}},
      {"llama2",
       "mistral-7b-instruct-v0.2.jinja",
       {"</s>"},
       {"It's 4. Ünïcødé 😀 too.</s>", "  6, with spaces.\n</s>"}},
  };
  for (const RealCase& c : cases) {
    SCOPED_TRACE(std::string(c.tokenizer) + " / " + c.template_file);
    const auto dir = test::fixtures_dir() / "tokenizers" / c.tokenizer;
    if (!std::filesystem::exists(dir / "tokenizer.json")) {
      ADD_FAILURE() << "tokenizer fixture missing: " << dir << "; run scripts/fetch_tokenizer_fixtures.sh";
      continue;
    }
    const Tokenizer tokenizer = Tokenizer::load(dir);
    const auto config = nlohmann::json::parse(test::read_file(dir / "tokenizer_config.json"));
    const ChatTemplate tpl(fixture_template(c.template_file), c.template_file,
                           ChatTemplate::special_tokens_from_config(config));
    ChatTextOptions o;
    o.stop_strings = c.stops;
    const bool mistral_v02 = std::string(c.template_file) == "mistral-7b-instruct-v0.2.jinja";
    const TrainingText text = chat_training_text(
        tpl, jinja::from_json(ordered_json::parse(mistral_v02 ? no_system : conversation)), o);
    const TokenizerTextEncoder encoder(tokenizer);
    TokenizeStats stats;
    const Document doc = tokenize_training_text(text, encoder, &stats);
    EXPECT_EQ(stats.encoded_by_range, 0);
    // The ids are exactly the tokenizer's for the whole text (apply_chat_template(tokenize=True)).
    EXPECT_EQ(doc.input_ids, tokenizer.encode(text.text, false));
    std::vector<std::string> trained;
    std::vector<int32_t> run;
    for (size_t i = 0; i <= doc.labels.size(); ++i) {
      if (i < doc.labels.size() && doc.labels[i] != kIgnoreIndex) {
        run.push_back(doc.labels[i]);
      } else if (!run.empty()) {
        trained.push_back(tokenizer.decode(run));
        run.clear();
      }
    }
    // SentencePiece decoding drops the first space of a piece; compare the text the ranges cover.
    EXPECT_EQ(range_texts(text), c.expected);
    ASSERT_EQ(trained.size(), c.expected.size());
    if (std::string(c.tokenizer) != "llama2") {
      EXPECT_EQ(trained, c.expected);
    }
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(ChatText, AssistantFirstNeedsARenderablePrompt) {
  // Llama 3.1's template reads messages[0], so it cannot render the empty prompt before a first
  // assistant message: a clear error, not a guessed mask.
  const ChatTemplate tpl(fixture_template("llama-3.1-instruct.jinja"), "llama-3.1",
                         {{"bos_token", "<|begin_of_text|>"}});
  ChatTextOptions o;
  o.stop_strings = {"<|eot_id|>"};
  try {
    chat_training_text(
        tpl, jinja::from_json(ordered_json::parse(R"([{"role": "assistant", "content": "Hi"}])")), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot render the prompt of assistant message 0"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(RealTokenizers, PlainTextIsTheTokenizersEncodingPlusEos) {
  for (const char* name : {"qwen3", "llama3", "llama2"}) {
    SCOPED_TRACE(name);
    const auto dir = test::fixtures_dir() / "tokenizers" / name;
    if (!std::filesystem::exists(dir / "tokenizer.json")) {
      ADD_FAILURE() << "tokenizer fixture missing: " << dir << "; run scripts/fetch_tokenizer_fixtures.sh";
      continue;
    }
    const Tokenizer tokenizer = Tokenizer::load(dir);
    const TokenizerTextEncoder encoder(tokenizer);
    const std::string prompt = "Below is a prompt:  with  spaces,\n\ttabs and ünïcode 😀.\n\n### Response:\n";
    const std::string completion = " The answer is 42.";
    TrainingText t{prompt + completion, {{prompt.size(), prompt.size() + completion.size()}}, {true}, true};
    TokenizeStats stats;
    const Document doc = tokenize_training_text(t, encoder, &stats);
    std::vector<int32_t> expected = tokenizer.encode(t.text, true);
    ASSERT_TRUE(tokenizer.eos_token_id().has_value());
    if (!tokenizer.adds_eos()) expected.push_back(*tokenizer.eos_token_id());
    EXPECT_EQ(doc.input_ids, expected);
    EXPECT_EQ(stats.encoded_by_range, 0);
    EXPECT_EQ(doc.labels.back(), *tokenizer.eos_token_id());
    // The trained tokens spell the completion (the prompt's tokens end where it ends here).
    std::vector<int32_t> trained;
    for (int32_t l : doc.labels)
      if (l != kIgnoreIndex) trained.push_back(l);
    trained.pop_back();
    EXPECT_EQ(tokenizer.decode(trained), std::string(name) == "llama2" ? completion.substr(1) : completion);
  }
}

}  // namespace
}  // namespace ferry
