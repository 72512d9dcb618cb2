#include "data/text_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "data/data_file.h"
#include "data/progress_log.h"
#include "data/token_dataset.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "data";
using nlohmann::ordered_json;

constexpr size_t kProgressBatch = 16384;  // records between progress checks

struct Record {
  int64_t line = 0;  // 1-based line the record starts on
  std::string_view text;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

std::string_view strip_bom(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

int64_t line_at(std::string_view text, size_t offset) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

std::vector<Record> jsonl_records(std::string_view content) {
  std::vector<Record> records;
  int64_t line = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    ++line;
    std::string_view text = content.substr(pos, end - pos);
    if (line == 1) text = strip_bom(text);
    if (std::any_of(text.begin(), text.end(), [](char c) { return !is_space(c); }))
      records.push_back({line, text});
    pos = end + 1;
  }
  return records;
}

// The elements of a top-level JSON array, each with the line it starts on. Only the array's
// structure is read here (strings, nesting); each element is parsed later, as its own record.
std::vector<Record> json_array_records(std::string_view content, const std::string& name) {
  std::vector<Record> records;
  size_t pos = content.find('[');
  int64_t line = line_at(content, pos);
  ++pos;
  auto skip_space = [&] {
    while (pos < content.size() && is_space(content[pos])) {
      if (content[pos] == '\n') ++line;
      ++pos;
    }
  };
  skip_space();
  if (pos < content.size() && content[pos] == ']') return records;
  while (true) {
    skip_space();
    const size_t start = pos;
    const int64_t start_line = line;
    int depth = 0;
    bool in_string = false;
    for (; pos < content.size(); ++pos) {
      const char c = content[pos];
      if (c == '\n') ++line;
      if (in_string) {
        if (c == '\\') {
          ++pos;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
      } else if (c == ',' && depth == 0) {
        break;
      }
    }
    FERRY_CHECK(pos < content.size(), kWhere,
                "{}:{}: the JSON array is not closed with ']'; is the file truncated?", name, start_line);
    size_t end = pos;
    while (end > start && is_space(content[end - 1])) --end;
    records.push_back({start_line, content.substr(start, end - start)});
    if (content[pos] == ']') break;
    ++pos;  // ','
  }
  ++pos;
  skip_space();
  FERRY_CHECK(pos >= content.size(), kWhere, "{}:{}: text after the end of the JSON array", name, line);
  return records;
}

bool starts_json_array(std::string_view content) {
  content = strip_bom(content);
  for (char c : content) {
    if (is_space(c)) continue;
    return c == '[';
  }
  return false;
}

// Offset of the first byte that is not valid UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string_view::npos;
}

// The outcome of one record: a document, a reason it is malformed, or a fatal error.
struct Outcome {
  std::optional<Document> document;
  std::string malformed;
  std::string fatal;
  TokenizeStats tokenize;
};

void check_vocabulary(const Document& doc, int64_t vocab_size, Outcome* out) {
  if (vocab_size <= 0) return;
  for (int32_t id : doc.input_ids) {
    if (id >= vocab_size) {
      out->fatal = fmt::format(
          "the tokenizer produced token id {}, outside the model's vocabulary [0, {}); the tokenizer does "
          "not "
          "belong to this model (check `tokenizer:`)",
          id, vocab_size);
      out->document.reset();
      return;
    }
  }
}

void tokenize_into(const TrainingText& text, const TextDataOptions& options, Outcome* out) {
  FERRY_CHECK(options.encoder != nullptr, kWhere, "text data needs a tokenizer");
  out->document = tokenize_training_text(text, *options.encoder, &out->tokenize);
  check_vocabulary(*out->document, options.vocab_size, out);
}

Outcome process_record(DataFormat format, const Record& record, const TextDataOptions& options) {
  Outcome out;
  try {
    if (format == DataFormat::Tokens) {
      TokenDataOptions token_options;
      token_options.vocab_size = options.vocab_size;
      Document doc;
      out.malformed = parse_token_record(record.text, token_options, &doc);
      if (out.malformed.empty()) out.document = std::move(doc);
      return out;
    }
    std::optional<ordered_json> json = try_parse_ordered_json(record.text, &out.malformed);
    if (!json) return out;
    RecordOptions record_options;
    record_options.chat_template = options.chat_template;
    record_options.chat = options.chat;
    record_options.train_on_prompt = options.train_on_prompt;
    TrainingText text;
    out.malformed = record_training_text(format, *json, record_options, &text);
    if (out.malformed.empty()) tokenize_into(text, options, &out);
  } catch (const Error& e) {
    out.fatal = e.what();
  }
  return out;
}

DataFormat detect_file_format(const std::vector<Record>& records, const std::string& name) {
  for (const Record& r : records) {
    std::string error;
    const std::optional<ordered_json> json = try_parse_ordered_json(r.text, &error);
    if (!json) continue;  // reported as malformed when the records are read
    const auto format = detect_data_format(*json);
    FERRY_CHECK(
        format.has_value(), kWhere,
        "{}:{}: cannot tell the data format from this record (keys found: {}); records need 'text', "
        "'instruction'/'output' (alpaca), 'conversations' (sharegpt), 'messages', 'prompt'/'completion' or "
        "'input_ids'; or set data_format: to one of {}",
        name, r.line, json_key_list(*json), data_format_names());
    return *format;
  }
  fail(kWhere, "{}: no record is valid JSON, so its format cannot be detected", name);
}

void add_document(Outcome& o, std::vector<Document>* docs, TextDataStats* s) {
  s->tokens += static_cast<int64_t>(o.document->input_ids.size());
  s->eos_inserted += o.tokenize.eos_inserted;
  s->encoded_by_range += o.tokenize.encoded_by_range;
  int64_t trained = 0;
  for (int32_t l : o.document->labels) trained += l != kIgnoreIndex;
  s->trained_tokens += trained;
  docs->push_back(std::move(*o.document));
}

std::vector<Document> load_file(const std::filesystem::path& path, const TextDataOptions& options,
                                TextDataStats* s) {
  const std::string name = path.string();
  const std::string content = read_data_file(path);
  ++s->files;
  std::vector<Document> docs;
  const bool plain_text = data_extension(path) == ".txt";
  const DataFormat format = plain_text ? DataFormat::Text : options.format;
  if (plain_text) {
    FERRY_CHECK(options.format == DataFormat::Auto || options.format == DataFormat::Text, kWhere,
                "{} is a plain text file but data_format is '{}'; use data_format: text or auto", name,
                data_format_name(options.format));
    ++s->records;
    ++s->records_by_format["text"];
    const std::string_view text = strip_bom(content);
    const size_t bad = invalid_utf8_at(text);
    if (bad != std::string_view::npos) {
      const std::string what =
          fmt::format("{}:{}: not valid UTF-8 (byte 0x{:02x}); convert the file to UTF-8", name,
                      line_at(text, bad), static_cast<unsigned char>(text[bad]));
      if (!options.skip_malformed) fail(kWhere, "{}", what);
      log_warn("[data] {}; file skipped (skip_malformed)", what);
      ++s->skipped_malformed;
      return docs;
    }
    if (std::all_of(text.begin(), text.end(), is_space)) {
      log_warn("[data] {} holds no text; no document", name);
      ++s->empty_texts;
      return docs;
    }
    TrainingText t;
    t.text = std::string(text);
    t.trained = {ByteRange{0, t.text.size()}};
    t.eos_after = {true};
    Outcome o;
    tokenize_into(t, options, &o);
    if (!o.fatal.empty()) fail(kWhere, "{}: {}", name, o.fatal);
    add_document(o, &docs, s);
    return docs;
  }

  const std::vector<Record> records =
      starts_json_array(content) ? json_array_records(content, name) : jsonl_records(content);
  if (records.empty()) {
    log_warn("[data] {} holds no records", name);
    return docs;
  }
  const DataFormat file_format = format == DataFormat::Auto ? detect_file_format(records, name) : format;
  s->records += static_cast<int64_t>(records.size());
  s->records_by_format[data_format_name(file_format)] += static_cast<int64_t>(records.size());
  log_debug("[data] {}: {} records, format {}", name, records.size(), data_format_name(file_format));

  // In batches, so that a large file reports its progress (a line every few seconds) instead of
  // being silent for minutes; the batches change nothing in the result.
  std::vector<Outcome> outcomes(records.size());
  ProgressLog progress(
      fmt::format("data: {}: {} records ({})", name, records.size(), data_format_name(file_format)));
  for (size_t start = 0; start < records.size(); start += kProgressBatch) {
    const size_t stop = std::min(records.size(), start + kProgressBatch);
    ThreadPool::global().parallel_for(
        stop - start,
        [&](size_t begin, size_t end) {
          for (size_t i = start + begin; i < start + end; ++i)
            outcomes[i] = process_record(file_format, records[i], options);
        },
        8);
    progress.update(stop, records.size());
  }
  for (size_t i = 0; i < records.size(); ++i) {
    Outcome& o = outcomes[i];
    if (!o.fatal.empty()) fail(kWhere, "{}:{}: {}", name, records[i].line, o.fatal);
    if (!o.malformed.empty()) {
      if (!options.skip_malformed) fail(kWhere, "{}:{}: {}", name, records[i].line, o.malformed);
      ++s->skipped_malformed;
      log_warn("[data] {}:{}: {}; record skipped (skip_malformed)", name, records[i].line, o.malformed);
      continue;
    }
    add_document(o, &docs, s);
  }
  return docs;
}

}  // namespace

TextDataStats& TextDataStats::operator+=(const TextDataStats& o) {
  files += o.files;
  records += o.records;
  documents += o.documents;
  tokens += o.tokens;
  trained_tokens += o.trained_tokens;
  skipped_malformed += o.skipped_malformed;
  empty_texts += o.empty_texts;
  eos_inserted += o.eos_inserted;
  encoded_by_range += o.encoded_by_range;
  for (const auto& [k, v] : o.records_by_format) records_by_format[k] += v;
  return *this;
}

DataFormat file_data_format(const std::filesystem::path& path, DataFormat configured) {
  if (data_extension(path) == ".txt") return DataFormat::Text;
  if (configured != DataFormat::Auto) return configured;
  if (is_gzip_path(path)) {  // no peeking into a compressed stream: decompress it whole
    const std::string content = read_data_file(path);
    const std::vector<Record> records =
        starts_json_array(content) ? json_array_records(content, path.string()) : jsonl_records(content);
    FERRY_CHECK(!records.empty(), kWhere, "{} holds no records", path.string());
    return detect_file_format(records, path.string());
  }
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.is_open(), kWhere, "cannot open {}: {}", path.string(), std::strerror(errno));
  const char first = static_cast<char>(in.peek());
  if (first == '[' || first == ' ' || first == '\n' || first == '\t' || first == '\r' || first == '\xEF') {
    // A JSON array (or leading space / BOM): read it whole.
    in.close();
    const std::string content = read_data_file(path);
    const std::vector<Record> records =
        starts_json_array(content) ? json_array_records(content, path.string()) : jsonl_records(content);
    FERRY_CHECK(!records.empty(), kWhere, "{} holds no records", path.string());
    return detect_file_format(records, path.string());
  }
  // JSON Lines: the first record that parses decides, without reading the rest of the file.
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::vector<Record> records = jsonl_records(line);
    if (records.empty()) continue;
    if (!ordered_json::accept(records[0].text)) continue;
    return detect_file_format({Record{number, records[0].text}}, path.string());
  }
  fail(kWhere, "{} holds no valid JSON record, so its format cannot be detected", path.string());
}

std::vector<Document> load_text_documents(const std::vector<std::filesystem::path>& paths,
                                          const TextDataOptions& options, TextDataStats* stats) {
  FERRY_CHECK(!paths.empty(), kWhere, "no data files given");
  TextDataStats total;
  std::vector<Document> docs;
  for (const auto& path : paths) {
    std::vector<Document> part = load_file(path, options, &total);
    docs.insert(docs.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  total.documents = static_cast<int64_t>(docs.size());
  if (total.skipped_malformed > 0)
    log_warn("[data] skipped {} malformed record(s) of {} (skip_malformed)", total.skipped_malformed,
             total.records);
  if (total.encoded_by_range > 0)
    log_warn(
        "[data] {} record(s) were encoded range by range because the tokenizer's normalizer changed their "
        "text, so their tokens could not be aligned with the characters for the loss mask",
        total.encoded_by_range);
  FERRY_CHECK(!docs.empty(), kWhere,
              "the data holds no documents ({} record(s) in {} file(s), {} skipped as malformed)",
              total.records, total.files, total.skipped_malformed);
  if (stats) *stats = total;
  return docs;
}

}  // namespace ferry
