#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "core/thread_pool.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry {

using namespace ferry::tok;

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::unordered_set<std::string> special_contents;
  int64_t vocab_size = 0;
  std::vector<int32_t> prefix, suffix;  // what the post-processor adds around a sequence
  std::optional<int32_t> bos, eos, pad;
};

namespace {

// tokenizer_config.json's "bos_token" etc.: a string, {"content": ...} or null.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (json_has(*it, "content", &nlohmann::json::is_string)) return (*it)["content"].get<std::string>();
  fail("Tokenizer::load", "\"{}\" in tokenizer_config.json is {}; expected a string or {{\"content\": ...}}",
       key, json_excerpt(*it));
}

std::optional<bool> config_bool(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

}  // namespace

// Fields are read with checks that name them (tokenizer/json_util.h); the catch is for any access
// that still meets a value of a type it does not expect, so that it too names the files.
Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) try {
  constexpr const char* kIncomplete = "perhaps an incomplete download";
  const nlohmann::json root = parse_json(tokenizer_json, "Tokenizer::load", "tokenizer.json", kIncomplete);
  const nlohmann::json config =
      config_json.empty() ? nlohmann::json::object()
                          : parse_json(config_json, "Tokenizer::load", "tokenizer_config.json", kIncomplete);
  if (!root.is_object()) fail("Tokenizer::load", "tokenizer.json is not a JSON object");
  if (!config.is_object()) fail("Tokenizer::load", "tokenizer_config.json is not a JSON object");

  auto impl = std::make_shared<Impl>();
  auto section = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json null_json;
    const auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  impl->normalizer = make_normalizer(section("normalizer"));
  impl->pre_tokenizer = make_pre_tokenizer(section("pre_tokenizer"));
  impl->model = std::make_unique<BpeModel>(json_field(root, "model", "tokenizer.json"));
  impl->post_processor = make_post_processor(section("post_processor"));
  impl->decoder = make_decoder(section("decoder"));
  for (const char* key : {"truncation", "padding"}) {
    if (!section(key).is_null())
      log_warn(
          "tokenizer.json sets \"{}\"; ferry ignores it (sequence length and padding are set in the training "
          "config)",
          key);
  }

  std::vector<AddedToken> added;
  if (!section("added_tokens").is_null()) {
    for (const auto& t : json_array(root, "added_tokens", "tokenizer.json")) {
      AddedToken a;
      a.content = json_string(t, "content", "added token");
      const auto& id = json_field(t, "id", "added token");
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        fail("Tokenizer::load", "added token \"{}\" has id {}; expected a non-negative integer", a.content,
             json_excerpt(id));
      a.id = id.get<int32_t>();
      a.special = json_bool(t, "special", false, "added token");
      a.single_word = json_bool(t, "single_word", false, "added token");
      a.lstrip = json_bool(t, "lstrip", false, "added token");
      a.rstrip = json_bool(t, "rstrip", false, "added token");
      a.normalized = json_bool(t, "normalized", !a.special, "added token");
      if (a.special) impl->special_contents.insert(a.content);
      added.push_back(std::move(a));
    }
  }
  // HF's get_vocab_size(true): distinct token strings of the model and the added tokens.
  impl->vocab_size = static_cast<int64_t>(impl->model->vocab_size());
  std::unordered_set<std::string> counted;
  for (const auto& a : added) {
    if (!impl->model->token_to_id(a.content) && counted.insert(a.content).second) ++impl->vocab_size;
  }
  impl->added = AddedVocabulary(std::move(added), impl->normalizer.get());

  Tokenizer tokenizer(impl);
  auto lookup = [&](const char* key) -> std::optional<int32_t> {
    const auto token = config_token(config, key);
    if (!token) return std::nullopt;
    const auto id = tokenizer.token_to_id(*token);
    if (!id) log_warn("tokenizer_config.json's {} \"{}\" is not in the vocabulary; ignored", key, *token);
    return id;
  };
  impl->bos = lookup("bos_token");
  impl->eos = lookup("eos_token");
  impl->pad = lookup("pad_token");

  // transformers' LlamaTokenizerFast (and Gemma's) rebuild the post-processor from add_bos_token /
  // add_eos_token; a tokenizer.json without a post-processor takes them from there too.
  const auto class_it = config.find("tokenizer_class");
  if (class_it != config.end() && !class_it->is_null() && !class_it->is_string())
    fail("Tokenizer::load", "\"tokenizer_class\" in tokenizer_config.json is {}, not a string",
         json_excerpt(*class_it));
  const std::string cls =
      class_it != config.end() && class_it->is_string() ? class_it->get<std::string>() : "";
  const bool rebuilds = cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast" ||
                        cls == "CodeLlamaTokenizer" || cls == "CodeLlamaTokenizerFast" ||
                        cls == "GemmaTokenizer" || cls == "GemmaTokenizerFast";
  const auto add_bos = config_bool(config, "add_bos_token"), add_eos = config_bool(config, "add_eos_token");
  if ((add_bos || add_eos) && (rebuilds || !impl->post_processor)) {
    std::vector<int32_t> prefix, suffix;
    if (add_bos.value_or(rebuilds) && impl->bos) prefix.push_back(*impl->bos);
    if (add_eos.value_or(false) && impl->eos) suffix.push_back(*impl->eos);
    impl->post_processor = make_affix_processor(std::move(prefix), std::move(suffix));
  }

  // What the post-processor adds, found by running it around a sentinel.
  if (impl->post_processor) {
    constexpr int32_t kSentinel = INT32_MIN;
    std::vector<int32_t> probe{kSentinel};
    impl->post_processor->process(probe);
    const auto at = std::find(probe.begin(), probe.end(), kSentinel);
    FERRY_ASSERT(at != probe.end(), "the post-processor lost the sequence");
    impl->prefix.assign(probe.begin(), at);
    impl->suffix.assign(at + 1, probe.end());
  }
  if (config_json.empty()) {
    if (!impl->prefix.empty()) impl->bos = impl->prefix.front();
    if (!impl->suffix.empty()) impl->eos = impl->suffix.back();
  }
  return tokenizer;
} catch (const nlohmann::json::exception& e) {
  fail("Tokenizer::load",
       "tokenizer.json or tokenizer_config.json holds a value of an unexpected type ({}); perhaps "
       "an incomplete download or a hand edit",
       e.what());
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::filesystem::path json_path = path, dir = path;
  if (std::filesystem::is_directory(path)) {
    json_path = path / "tokenizer.json";
  } else {
    dir = path.parent_path();
  }
  if (!std::filesystem::is_regular_file(json_path))
    fail("Tokenizer::load",
         "no tokenizer.json at {}; pass a Hugging Face model directory or a tokenizer.json path "
         "(models with only a SentencePiece tokenizer.model need converting with transformers first)",
         json_path.string());
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const std::string config = std::filesystem::is_regular_file(config_path)
                                 ? read_text_file(config_path, "Tokenizer::load")
                                 : std::string();
  try {
    return from_json(read_text_file(json_path, "Tokenizer::load"), config);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in " + json_path.string() + ")");
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& t = *impl_;
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  Piece whole;
  whole.text = is_valid_utf8(text) ? std::string(text) : repair_utf8(text);
  whole.at_origin = true;
  pieces.push_back(std::move(whole));

  t.added.split(pieces, /*normalized_set=*/false);
  if (t.normalizer) {
    for (auto& p : pieces)
      if (p.id < 0) t.normalizer->normalize(p.text);
  }
  t.added.split(pieces, /*normalized_set=*/true);
  std::erase_if(pieces, [](const Piece& p) { return p.id < 0 && p.text.empty(); });
  if (t.pre_tokenizer) t.pre_tokenizer->pre_tokenize(pieces);

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const auto& p : pieces) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      t.model->tokenize(p.text, ids);
  }
  if (add_special_tokens && t.post_processor) t.post_processor->process(ids);
  return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          bool add_special_tokens) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  if (texts.size() <= 1) {
    for (size_t k = 0; k < texts.size(); ++k) out[k] = encode(texts[k], add_special_tokens);
    return out;
  }
  // Texts differ in length: threads take the next text as they finish, not a fixed share.
  std::atomic<size_t> next{0};
  ThreadPool::global().run_on_all([&](size_t, size_t) {
    for (size_t k = next.fetch_add(1); k < texts.size(); k = next.fetch_add(1))
      out[k] = encode(texts[k], add_special_tokens);
  });
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* a = t.added.find_id(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->content);
      continue;
    }
    const std::string* token = t.model->id_to_token(id);
    if (token == nullptr) continue;  // HF drops ids without a token
    if (skip_special_tokens && t.special_contents.count(*token)) continue;
    tokens.push_back(*token);
  }
  if (!t.decoder) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k > 0) out += ' ';
      out += tokens[k];
    }
    return out;
  }
  t.decoder->decode_chain(tokens);
  std::string out;
  for (const auto& s : tokens) out += s;
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = impl_->added.find_content(std::string(token))) return a->id;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = impl_->added.find_id(id)) return a->content;
  if (const std::string* s = impl_->model->id_to_token(id)) return *s;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::bos_token_id() const {
  return impl_->bos;
}
std::optional<int32_t> Tokenizer::eos_token_id() const {
  return impl_->eos;
}
std::optional<int32_t> Tokenizer::pad_token_id() const {
  return impl_->pad;
}

bool Tokenizer::adds_bos() const {
  const auto& p = impl_->prefix;
  return !p.empty() && (!impl_->bos || p.front() == *impl_->bos);
}

bool Tokenizer::adds_eos() const {
  const auto& s = impl_->suffix;
  return !s.empty() && (!impl_->eos || s.back() == *impl_->eos);
}

const std::vector<int32_t>& Tokenizer::special_prefix() const {
  return impl_->prefix;
}
const std::vector<int32_t>& Tokenizer::special_suffix() const {
  return impl_->suffix;
}

}  // namespace ferry
