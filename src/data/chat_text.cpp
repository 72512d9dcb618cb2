#include "data/chat_text.h"

#include <algorithm>

#include "core/error.h"
#include "jinja/builtins.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "chat";

bool is_assistant(const jinja::Value& message) {
  if (!message.is_dict()) return false;
  const jinja::Value* role = message.dict_data().find_name("role");
  return role && role->is_string() && role->as_string() == "assistant";
}

// The end of the last stop string inside text[begin, end), or npos.
size_t last_stop_end(const std::string& text, size_t begin, size_t end,
                     const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& stop : stops) {
    if (stop.empty() || end - begin < stop.size()) continue;
    const size_t at = text.rfind(stop, end - stop.size());
    if (at == std::string::npos || at < begin) continue;
    if (best == std::string::npos || at + stop.size() > best) best = at + stop.size();
  }
  return best;
}

// What the template writes after messages[:i] when asked for a generation prompt.
std::string generation_prompt(const ChatTemplate& tpl, const std::vector<jinja::Value>& items, size_t i,
                              const ChatRenderOptions& base) {
  const jinja::Value prefix = jinja::Value::list(
      std::vector<jinja::Value>(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(i)));
  ChatRenderOptions with = base;
  with.add_generation_prompt = true;
  const ChatRendering p = tpl.render(prefix, with);
  size_t q = 0;
  bool attributed = false;
  for (const auto& ranges : p.message_ranges) {
    for (const auto& [b, e] : ranges) {
      q = std::max(q, e);
      attributed = true;
    }
  }
  if (!attributed) {
    // Nothing of messages[:i] came from a loop over them (e.g. only a system message, written before
    // the loop): the prompt is what add_generation_prompt adds.
    ChatRenderOptions without = base;
    without.add_generation_prompt = false;
    const std::string plain = tpl.render(prefix, without).text;
    if (p.text.compare(0, plain.size(), plain) == 0) q = plain.size();
  }
  return p.text.substr(q);
}

struct Turn {
  ByteRange range;
  bool eos_after;
};

}  // namespace

TrainingText chat_training_text(const ChatTemplate& tpl, const jinja::Value& messages,
                                const ChatTextOptions& options) {
  FERRY_ASSERT(!options.stop_strings.empty(), "chat_training_text needs the model's stop strings");
  ChatRenderOptions render = options.render;
  render.add_generation_prompt = false;
  const ChatRendering full = tpl.render(messages, render);
  const std::vector<jinja::Value>& items = messages.list_data().items;
  const std::string& text = full.text;

  std::vector<Turn> turns;
  auto message_of = [&](size_t byte) -> std::optional<size_t> {
    for (size_t i = 0; i < full.message_ranges.size(); ++i)
      for (const auto& [b, e] : full.message_ranges[i])
        if (b <= byte && byte < e) return i;
    return std::nullopt;
  };
  if (!full.generation_spans.empty()) {
    for (const auto& [b, e] : full.generation_spans) {
      if (b >= e) continue;
      const auto owner = message_of(b);
      if (owner && *owner < options.first_trained_message) continue;
      turns.push_back({{b, e}, last_stop_end(text, b, e, options.stop_strings) == std::string::npos});
    }
    std::sort(turns.begin(), turns.end(),
              [](const Turn& a, const Turn& b) { return a.range.begin < b.range.begin; });
  } else {
    for (size_t i = options.first_trained_message; i < items.size(); ++i) {
      if (!is_assistant(items[i])) continue;
      const auto& ranges = full.message_ranges[i];
      if (ranges.empty())
        fail(
            kWhere,
            "assistant message {} does not appear in the output of chat template {} (no loop of the template "
            "visited it), so its tokens cannot be told apart from the prompt; use a template that loops over "
            "messages, or one with {{% generation %}} tags",
            i, tpl.name());
      const size_t region_begin = ranges.front().first, region_end = ranges.back().second;
      std::string prompt;
      try {
        prompt = generation_prompt(tpl, items, i, render);
      } catch (const Error& e) {
        fail(kWhere,
             "the chat template cannot render the prompt of assistant message {} (messages[:{}] with "
             "add_generation_prompt), which the loss mask needs: {}",
             i, i, e.what());
      }
      size_t start = region_begin;
      while (start < region_end && start - region_begin < prompt.size() &&
             text[start] == prompt[start - region_begin])
        ++start;
      const size_t stop_end = last_stop_end(text, start, region_end, options.stop_strings);
      const size_t end = stop_end == std::string::npos ? region_end : stop_end;
      if (start >= end) continue;  // an empty turn with no end marker: nothing the model produces
      turns.push_back({{start, end}, stop_end == std::string::npos});
    }
  }
  for (size_t k = 1; k < turns.size(); ++k)
    FERRY_CHECK(turns[k].range.begin >= turns[k - 1].range.end, kWhere,
                "chat template {} writes assistant turns that overlap; cannot build a loss mask", tpl.name());

  TrainingText out;
  out.text = text;
  out.add_special_tokens = false;
  if (!options.train_on_prompt) {
    for (const Turn& t : turns) {
      out.trained.push_back(t.range);
      out.eos_after.push_back(t.eos_after);
    }
    return out;
  }
  // Everything is trained; the ranges only cut the text where an eos token goes.
  size_t begin = 0;
  for (const Turn& t : turns) {
    if (!t.eos_after) continue;
    out.trained.push_back({begin, t.range.end});
    out.eos_after.push_back(true);
    begin = t.range.end;
  }
  if (begin < text.size()) {
    out.trained.push_back({begin, text.size()});
    out.eos_after.push_back(false);
  }
  return out;
}

}  // namespace ferry
