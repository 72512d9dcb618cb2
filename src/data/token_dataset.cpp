#include "data/token_dataset.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "data/data_file.h"
#include "data/progress_log.h"

namespace ferry {

namespace {

using nlohmann::json;

// A short rendering of a JSON value for an error message (a long array would drown the message).
std::string show(const json& value) {
  return json_excerpt(value, 40);
}

// Reads an integer element of a JSON array into *out; returns an error text, or "" when it is fine.
// `what` names the element for the message, e.g. "'input_ids'[3]".
std::string read_int32(const json& value, const std::string& what, const char* expected, int32_t* out) {
  if (!value.is_number_integer())
    return fmt::format("{} is {}, not an integer{}", what, show(value), expected);
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      return fmt::format("{} is {}, too large for a token id", what, u);
    *out = static_cast<int32_t>(u);
    return "";
  }
  const int64_t i = value.get<int64_t>();
  if (i < std::numeric_limits<int32_t>::min() || i > std::numeric_limits<int32_t>::max())
    return fmt::format("{} is {}, out of the range of token ids", what, i);
  *out = static_cast<int32_t>(i);
  return "";
}

std::string parse_ids(const json& array, const TokenDataOptions& options, std::vector<int32_t>* ids) {
  ids->resize(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string what = fmt::format("'input_ids'[{}]", i);
    std::string error = read_int32(array[i], what, " token id", &(*ids)[i]);
    if (!error.empty()) return error;
    const int32_t id = (*ids)[i];
    if (id < 0) return fmt::format("{} is {}; token ids must be >= 0", what, id);
    if (options.vocab_size > 0 && id >= options.vocab_size)
      return fmt::format(
          "{} is {}, outside the vocabulary [0, {}); was the data tokenized for another model?", what, id,
          options.vocab_size);
  }
  return "";
}

std::string parse_labels(const json& array, const TokenDataOptions& options, std::vector<int32_t>* labels) {
  labels->resize(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string what = fmt::format("'labels'[{}]", i);
    std::string error = read_int32(array[i], what, " (a token id, or -100 to mask the token)", &(*labels)[i]);
    if (!error.empty()) return error;
    const int32_t label = (*labels)[i];
    if (label < 0 && label != kIgnoreIndex)
      return fmt::format("{} is {}; a label must be a token id or -100 (masked)", what, label);
    if (options.vocab_size > 0 && label >= options.vocab_size)
      return fmt::format("{} is {}, outside the vocabulary [0, {})", what, label, options.vocab_size);
  }
  return "";
}

void check_options(const TokenDataOptions& options) {
  FERRY_CHECK(options.vocab_size >= 0, "data", "vocab_size is {}; it must be >= 0 (0 = unchecked)",
              options.vocab_size);
  if (options.eos_token_id) {
    const int32_t eos = *options.eos_token_id;
    FERRY_CHECK(eos >= 0, "data", "eos_token_id is {}; token ids must be >= 0", eos);
    FERRY_CHECK(options.vocab_size == 0 || eos < options.vocab_size, "data",
                "eos_token_id {} is outside the vocabulary [0, {})", eos, options.vocab_size);
  }
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

}  // namespace

TokenDataStats& TokenDataStats::operator+=(const TokenDataStats& other) {
  lines += other.lines;
  documents += other.documents;
  tokens += other.tokens;
  skipped_malformed += other.skipped_malformed;
  eos_appended += other.eos_appended;
  return *this;
}

std::string parse_token_record(std::string_view line, const TokenDataOptions& options, Document* out) {
  std::string parse_error;
  const std::optional<json> parsed = try_parse_json(line, &parse_error);
  if (!parsed) return parse_error + "; each line must be one JSON object such as {\"input_ids\": [1, 2, 3]}";
  const json& record = *parsed;
  if (!record.is_object())
    return fmt::format("a JSON {}, not an object; each line must be an object with an 'input_ids' array",
                       record.type_name());
  const auto ids_it = record.find("input_ids");
  if (ids_it == record.end())
    return fmt::format(
        "no 'input_ids' (keys found: {}); pre-tokenized data needs an 'input_ids' array of "
        "token ids on every line",
        json_key_list(record));
  if (!ids_it->is_array())
    return fmt::format("'input_ids' is {} ({}), not an array of token ids", show(*ids_it),
                       ids_it->type_name());
  if (ids_it->empty()) return "'input_ids' is empty; a document needs at least one token";

  Document doc;
  std::string error = parse_ids(*ids_it, options, &doc.input_ids);
  if (!error.empty()) return error;

  const auto labels_it = record.find("labels");
  if (labels_it == record.end() || labels_it->is_null()) {
    doc.labels = doc.input_ids;
  } else {
    if (!labels_it->is_array())
      return fmt::format("'labels' is {} ({}), not an array", show(*labels_it), labels_it->type_name());
    if (labels_it->size() != doc.input_ids.size())
      return fmt::format("'labels' has {} entries but 'input_ids' has {}; they must be the same length",
                         labels_it->size(), doc.input_ids.size());
    error = parse_labels(*labels_it, options, &doc.labels);
    if (!error.empty()) return error;
  }

  *out = std::move(doc);
  return "";
}

bool append_eos(Document* doc, int32_t eos_token_id) {
  if (!doc->input_ids.empty() && doc->input_ids.back() == eos_token_id) return false;
  doc->input_ids.push_back(eos_token_id);
  doc->labels.push_back(eos_token_id);
  return true;
}

std::vector<Document> load_token_jsonl(const std::filesystem::path& path, const TokenDataOptions& options,
                                       TokenDataStats* stats) {
  check_options(options);
  const std::string name = path.string();
  const std::string content = read_data_file(path);

  TokenDataStats local;
  std::vector<Document> docs;
  ProgressLog progress(fmt::format("data: {}: parsing token ids (bytes)", name));
  for (size_t pos = 0; pos < content.size();) {
    if (local.lines % 16384 == 0) progress.update(pos, content.size());
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    ++local.lines;
    std::string_view text(content.data() + pos, end - pos);
    pos = end + 1;
    // A UTF-8 byte-order mark at the start of the file is not part of the first record.
    if (local.lines == 1 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    if (is_blank(text)) continue;
    Document doc;
    const std::string error = parse_token_record(text, options, &doc);
    if (!error.empty()) {
      if (!options.skip_malformed) fail("data", "{}:{}: {}", name, local.lines, error);
      ++local.skipped_malformed;
      log_warn("[data] {}:{}: {}; line skipped (skip_malformed)", name, local.lines, error);
      continue;
    }
    if (options.eos_token_id && append_eos(&doc, *options.eos_token_id)) ++local.eos_appended;
    local.tokens += static_cast<int64_t>(doc.input_ids.size());
    docs.push_back(std::move(doc));
  }
  local.documents = static_cast<int64_t>(docs.size());
  if (local.skipped_malformed > 0)
    log_warn("[data] {}: skipped {} malformed line(s) of {}", name, local.skipped_malformed, local.lines);
  FERRY_CHECK(!docs.empty(), "data", "{} holds no documents ({} line(s), {} skipped as malformed)", name,
              local.lines, local.skipped_malformed);
  if (stats) *stats = local;
  return docs;
}

std::vector<Document> load_token_jsonl_files(const std::vector<std::filesystem::path>& paths,
                                             const TokenDataOptions& options, TokenDataStats* stats) {
  FERRY_CHECK(!paths.empty(), "data", "no data files given");
  TokenDataStats total;
  std::vector<Document> docs;
  for (const auto& path : paths) {
    TokenDataStats one;
    std::vector<Document> part = load_token_jsonl(path, options, &one);
    total += one;
    docs.insert(docs.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  if (stats) *stats = total;
  return docs;
}

}  // namespace ferry
