// Pre-tokenized JSONL datasets: one JSON object per line with `input_ids` and optional `labels`.
//
//   {"input_ids": [1, 415, 2936, 2], "labels": [-100, 415, 2936, 2]}
//
// `labels` defaults to `input_ids` (every token trained on); -100 masks a token. Other keys are
// ignored, and `"labels": null` counts as absent. Blank lines are skipped. A malformed line is an
// error naming the file, the line and what is wrong, unless skip_malformed is set, in which case it
// is skipped, counted and logged with a warning, one warning per line: never silently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/document.h"

namespace ferry {

struct TokenDataOptions {
  int64_t vocab_size = 0;               // ids and labels must be < vocab_size; 0 = unchecked
  bool skip_malformed = false;          // skip (and log) malformed lines instead of failing
  std::optional<int32_t> eos_token_id;  // appended to each document not already ending with it;
                                        // its label is the eos id (the model learns to stop)
};

struct TokenDataStats {
  int64_t lines = 0;              // lines read, blank ones included
  int64_t documents = 0;          // documents returned
  int64_t tokens = 0;             // tokens in the returned documents, eos included
  int64_t skipped_malformed = 0;  // lines skipped because skip_malformed was set
  int64_t eos_appended = 0;       // documents that got an eos token appended

  TokenDataStats& operator+=(const TokenDataStats& other);
};

// Reads one JSONL file. Throws ferry::Error ("[data] file:line: what is wrong; what to do") for a
// malformed line (unless skip_malformed), an unreadable file, or a file that yields no document.
// `stats`, when given, receives this file's counts.
std::vector<Document> load_token_jsonl(const std::filesystem::path& path, const TokenDataOptions& options,
                                       TokenDataStats* stats = nullptr);

// Reads several files in the given order and concatenates their documents; `stats` gets the totals.
std::vector<Document> load_token_jsonl_files(const std::vector<std::filesystem::path>& paths,
                                             const TokenDataOptions& options,
                                             TokenDataStats* stats = nullptr);

// Parses one line's text into a document, checking ids and labels against options.vocab_size (eos is
// not appended here). Returns an empty string on success, otherwise what is wrong with the line
// (without the file:line prefix).
std::string parse_token_record(std::string_view line, const TokenDataOptions& options, Document* out);

// Appends eos_token_id (label: itself) unless the document already ends with it; true if appended.
bool append_eos(Document* doc, int32_t eos_token_id);

}  // namespace ferry
