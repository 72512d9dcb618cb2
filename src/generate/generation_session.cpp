#include "generate/generation_session.h"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "generate/text_stream.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "generate";

// The model's limit, checked before the model is loaded: a prompt the model cannot read at all.
void check_prompt_length(int64_t tokens, const ModelConfig& config, const std::string& what) {
  FERRY_CHECK(tokens <= config.max_position_embeddings, kWhere,
              "{} has {} tokens, more than the {} the model takes (max_position_embeddings); shorten it",
              what, tokens, config.max_position_embeddings);
}

// The context for prompts of up to `longest` tokens when none is given: room for the reply, within
// the model's limit.
int64_t context_for(const GenerateOptions& o, const ModelConfig& config, int64_t longest) {
  if (o.context > 0) return o.context;
  return std::min(config.max_position_embeddings, longest + std::max<int64_t>(o.max_new_tokens, 1));
}

std::string describe(const SamplingOptions& s) {
  if (s.temperature == 0.0) return "greedy";
  return fmt::format("temperature {}, top_k {}, top_p {}, seed {}", s.temperature, s.top_k, s.top_p, s.seed);
}

void report_speed(const GenerationResult& r) {
  const int64_t prefilled = r.prompt_tokens - r.reused_tokens;
  const int64_t produced = static_cast<int64_t>(r.tokens.size()) + (r.finish == FinishReason::Stop ? 1 : 0);
  log_info(
      "prefill: {} tokens in {:.3f} s ({:.1f} tok/s){}; decode: {} tokens in {:.3f} s ({:.1f} tok/s); "
      "finish: {}",
      prefilled, r.prefill_seconds, r.prefill_seconds > 0 ? prefilled / r.prefill_seconds : 0.0,
      r.reused_tokens > 0 ? fmt::format(" ({} reused from the cache)", r.reused_tokens) : std::string(),
      produced, r.decode_seconds, r.decode_seconds > 0 ? produced / r.decode_seconds : 0.0,
      finish_reason_name(r.finish));
}

// Everything a run holds: the prompt builder first (a bad tokenizer fails before the model loads).
struct Session {
  GenerateOptions options;
  PromptBuilder prompts;
  ModelConfig config;

  explicit Session(const GenerateOptions& o)
      : options(checked_options(o)), prompts(checked_model(o.model), o.prompt) {
    if (o.threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(o.threads));
    config = load_model_config(o.model);
  }

  // Counts no run can use, refused before the model loads (a negative --context would otherwise
  // read as 0, the automatic size).
  static const GenerateOptions& checked_options(const GenerateOptions& o) {
    FERRY_CHECK(o.context >= 0, kWhere,
                "--context {} is invalid; give a number of tokens, or 0 for what the prompts and "
                "--max-new-tokens need",
                o.context);
    FERRY_CHECK(o.max_new_tokens >= 0, kWhere, "--max-new-tokens {} is invalid; give 0 or more",
                o.max_new_tokens);
    FERRY_CHECK(o.threads >= 0, kWhere, "--threads {} is invalid; give a number of threads, or 0 for all",
                o.threads);
    return o;
  }

  static const std::filesystem::path& checked_model(const std::filesystem::path& dir) {
    std::error_code ec;
    FERRY_CHECK(std::filesystem::is_regular_file(dir / "config.json", ec), kWhere,
                "{} is not a model directory (it has no config.json); give --model DIR, a Hugging Face model "
                "directory such as a download or a ferry run's output",
                dir.string());
    return dir;
  }

  nlohmann::ordered_json with_system(nlohmann::ordered_json messages) const {
    if (options.system.empty()) return messages;
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    all.push_back({{"role", "system"}, {"content", options.system}});
    for (auto& m : messages) all.push_back(std::move(m));
    return all;
  }
};

struct Loaded {
  GenerationModel model;
  std::unique_ptr<Generator> generator;
  SamplingOptions sampling;
};

Loaded load(const Session& s, int64_t context) {
  Loaded l;
  l.model = open_generation_model(s.options.model, parse_generation_backend(s.options.device), context);
  l.generator = std::make_unique<Generator>(*l.model.decoder, l.model.defaults.eos_ids);
  l.sampling = resolve_sampling(s.options, l.model.defaults);
  if (l.model.defaults.eos_ids.empty())
    log_warn(
        "the model names no eos_token_id (generation_config.json, config.json): replies run to "
        "--max-new-tokens");
  log_info("sampling: {}; up to {} new tokens; context {} tokens", describe(l.sampling),
           s.options.max_new_tokens, l.model.decoder->context());
  return l;
}

// Generates a reply to `prompt`, streaming its text and a newline to `out` when given; returns the
// result and the text.
std::pair<GenerationResult, std::string> reply(const Session& s, Loaded& l,
                                               const std::vector<int32_t>& prompt, std::FILE* out) {
  Sampler sampler(l.sampling);
  TextStream stream(s.prompts.tokenizer());
  const GenerationResult r =
      l.generator->generate(prompt, sampler, s.options.max_new_tokens, [&](int32_t token) {
        const std::string piece = stream.push(token);
        if (out != nullptr && !piece.empty()) {
          std::fputs(piece.c_str(), out);
          std::fflush(out);
        }
      });
  const std::string rest = stream.finish();
  if (out != nullptr) {
    // The newline before the speed line, which goes to stderr: on a terminal they share the screen.
    std::fputs((rest + "\n").c_str(), out);
    std::fflush(out);
  }
  report_speed(r);
  return {r, stream.text()};
}

}  // namespace

SamplingOptions resolve_sampling(const GenerateOptions& o, const GenerationDefaults& defaults) {
  SamplingOptions s = defaults.sampling;
  if (o.temperature) s.temperature = *o.temperature;
  if (o.top_k) s.top_k = *o.top_k;
  if (o.top_p) s.top_p = *o.top_p;
  if (o.greedy) s.temperature = 0.0;
  s.seed = o.seed;
  return s;
}

void generate_from_prompt(const GenerateOptions& options, const std::string& text, std::FILE* out) {
  Session s(options);
  std::vector<int32_t> prompt;
  if (options.raw || !s.prompts.has_chat_template()) {
    if (!options.system.empty() && options.raw)
      fail(kWhere, "--system needs the chat template, which --raw leaves out; drop one of them");
    if (!options.system.empty())
      fail(kWhere, "--system needs a chat template, and the model has none; give --chat-template FILE.jinja");
    if (!options.raw)
      log_info("the model has no chat template: the prompt is given as plain text (as with --raw)");
    prompt = s.prompts.plain(text);
  } else {
    prompt = s.prompts.conversation(
        s.with_system(nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}})));
  }
  check_prompt_length(static_cast<int64_t>(prompt.size()), s.config, "the prompt");
  Loaded l = load(s, context_for(options, s.config, static_cast<int64_t>(prompt.size())));
  reply(s, l, prompt, out);
}

void generate_from_messages(const GenerateOptions& options, const std::filesystem::path& path,
                            std::FILE* out) {
  Session s(options);
  std::ifstream in(path);
  FERRY_CHECK(in.good(), kWhere,
              "cannot read the messages file {}; give a JSONL file, one conversation a line", path.string());
  std::vector<nlohmann::ordered_json> conversations;
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  int64_t number = 0, longest = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", path.string(), number);
    nlohmann::ordered_json json;
    try {
      json = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(kWhere, "{}: not JSON ({}); each line is a list of messages or {{\"messages\": [...]}}", where,
           e.what());
    }
    if (json.is_object() && json.contains("messages")) json = json["messages"];
    FERRY_CHECK(json.is_array(), kWhere,
                "{}: expected a list of {{\"role\", \"content\"}} messages or {{\"messages\": [...]}}",
                where);
    json = s.with_system(std::move(json));
    try {
      prompts.push_back(s.prompts.conversation(json));
    } catch (const Error& e) {
      fail(kWhere, "{}: {}", where, e.what());
    }
    check_prompt_length(static_cast<int64_t>(prompts.back().size()), s.config, where);
    longest = std::max(longest, static_cast<int64_t>(prompts.back().size()));
    conversations.push_back(std::move(json));
  }
  FERRY_CHECK(!prompts.empty(), kWhere, "{} holds no conversation; give one JSON list of messages per line",
              path.string());
  Loaded l = load(s, context_for(options, s.config, longest));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto [r, text] = reply(s, l, prompts[i], nullptr);
    nlohmann::ordered_json record;
    nlohmann::ordered_json messages = conversations[i];
    messages.push_back({{"role", "assistant"}, {"content", text}});
    record["messages"] = messages;
    record["finish_reason"] = finish_reason_name(r.finish);
    record["prompt_tokens"] = r.prompt_tokens;
    record["completion_tokens"] = r.tokens.size();
    std::fputs((record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(), out);
    std::fflush(out);
  }
}

void chat(const GenerateOptions& options, std::FILE* in, std::FILE* out) {
  Session s(options);
  FERRY_CHECK(s.prompts.has_chat_template(), kWhere,
              "{} has no chat template (chat_template.jinja or tokenizer_config.json's \"chat_template\"), "
              "so ferry chat cannot write a conversation as the model reads it; give --chat-template "
              "FILE.jinja, or use ferry generate --prompt for plain text",
              options.model.string());
  Loaded l = load(s, options.context);
  const bool interactive = isatty(fileno(in)) != 0;
  if (interactive)
    std::fprintf(stderr, "Type a message; /reset starts a new conversation, /exit (or Ctrl-D) ends.\n");
  nlohmann::ordered_json history = s.with_system(nlohmann::ordered_json::array());
  std::string line;
  char buffer[4096];
  while (true) {
    if (interactive) {
      std::fputs(">>> ", stderr);
      std::fflush(stderr);
    }
    line.clear();
    bool got = false;
    while (std::fgets(buffer, sizeof(buffer), in) != nullptr) {
      got = true;
      line += buffer;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (!got) break;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history = s.with_system(nlohmann::ordered_json::array());
      l.generator->reset();
      continue;
    }
    if (line.empty()) continue;
    history.push_back({{"role", "user"}, {"content", line}});
    const std::vector<int32_t> prompt = s.prompts.conversation(history);
    if (static_cast<int64_t>(prompt.size()) >= l.model.decoder->context()) {
      log_warn(
          "the conversation has {} tokens and fills the context of {}; /reset starts a new one (or give a "
          "larger --context)",
          prompt.size(), l.model.decoder->context());
      history.erase(history.size() - 1);
      continue;
    }
    const auto [r, text] = reply(s, l, prompt, out);
    history.push_back({{"role", "assistant"}, {"content", text}});
  }
}

}  // namespace ferry
