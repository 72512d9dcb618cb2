#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

namespace {

constexpr const char* kWhiteSpace =
    R"(\t\n\x0B\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr const char* kWord = R"(\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{200C}\x{200D})";

// Per-thread match state: PCRE2 match data and a JIT stack large enough for long inputs.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const bool in_class = class_depth > 0;
      if (e == 's' || e == 'w') {
        const char* set = e == 's' ? kWhiteSpace : kWord;
        if (in_class) {
          out += set;
        } else {
          out += '[';
          out += set;
          out += ']';
        }
        ++i;
        continue;
      }
      if ((e == 'S' || e == 'W') && !in_class) {
        out += "[^";
        out += e == 'S' ? kWhiteSpace : kWord;
        out += ']';
        ++i;
        continue;
      }
      if (e == 'S' || e == 'W') {
        out += e == 'S' ? "\\P{White_Space}" : "\\W";
        ++i;
        continue;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (c == '[') {
      // "[]...]" and "[^]...]": a leading ']' is a literal in both syntaxes.
      ++class_depth;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

Regex Regex::pattern(std::string_view onig_pattern) {
  Regex r;
  r.source_ = std::string(onig_pattern);
  const std::string translated = onig_to_pcre2(onig_pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("tokenizer",
         "regex /{}/ does not compile (as /{}/ at offset {}): {}; the tokenizer.json uses a pattern "
         "ferry cannot translate",
         r.source_, translated, offset, reinterpret_cast<const char*>(message));
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  r.compiled_ = std::move(compiled);
  return r;
}

Regex Regex::literal(std::string_view text) {
  Regex r;
  r.source_ = std::string(text);
  r.literal_ = std::string(text);
  return r;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  if (!compiled_) {
    if (literal_.empty()) return;
    size_t at = 0;
    while ((at = text.find(literal_, at)) != std::string_view::npos) {
      matches.emplace_back(at, at + literal_.size());
      at += literal_.size();
    }
    return;
  }
  ThreadMatchState& state = thread_match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0, last_end = 0;
  bool have_last = false;
  while (at <= text.size()) {
    const int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, text.size(), at, 0, state.data,
                                                    state.context)
                                  : pcre2_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                                                state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail("tokenizer", "regex /{}/ failed on a text of {} bytes: {}", source_, text.size(),
           reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t start = ovector[0], end = ovector[1];
    // Like the onig crate's find_iter: no empty match right where the previous match ended.
    const bool repeat_at_end = start == end && have_last && start == last_end;
    if (!repeat_at_end) {
      matches.emplace_back(start, end);
      have_last = true;
      last_end = end;
    }
    if (end > start) {
      at = end;
    } else {
      if (end >= text.size()) return;
      at = end + utf8_length(static_cast<unsigned char>(text[end]));
    }
  }
}

}  // namespace ferry::tok
