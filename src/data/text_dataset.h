// Training data files of any format → documents (token ids and labels), in file and record order.
//
// Files:
// * .txt: plain text, one document per file: the whole file is one text, every token trained,
//   the tokenizer's special tokens added and eos appended. (Not split on blank lines: a book or a
//   source file stays one document, and packing already cuts long documents into rows; to get
//   many documents, use many files or JSONL with "text".) The file must be valid UTF-8; a bad byte
//   is reported with its line. A file of only whitespace yields no document (logged).
// * .jsonl (or any other name): one JSON object per line; blank lines are skipped.
// * .json: a JSON array of records (`[{...}, {...}]`), or JSON Lines when the file does not start
//   with '['. Records are reported by the line they start on.
//
// The format of a JSON file is data_format, or with `auto` detected from its first record
// (record_formats.h: detect_data_format), per file. A malformed record — bad JSON, missing or
// mistyped fields, a chat template that refuses the conversation — is an error
// "[data] FILE:LINE: what is wrong", or with skip_malformed a warning naming it, counted in the
// stats: never silent.
//
// Records are converted and tokenized on all threads of ThreadPool::global(); the result does not
// depend on the thread count.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/document.h"
#include "data/record_formats.h"
#include "data/text_encoder.h"

namespace ferry {

struct TextDataOptions {
  DataFormat format = DataFormat::Auto;
  bool skip_malformed = false;
  bool train_on_prompt = false;
  int64_t vocab_size = 0;                // token ids must be < vocab_size; 0 = unchecked
  const TextEncoder* encoder = nullptr;  // needed unless every file is pre-tokenized
  const ChatTemplate* chat_template = nullptr;
  ChatTextOptions chat;  // stop strings and template variables for chat records
};

struct TextDataStats {
  int64_t files = 0;
  int64_t records = 0;  // records read (JSON records, or .txt files)
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;  // labels that are not -100
  int64_t skipped_malformed = 0;
  int64_t empty_texts = 0;  // .txt files without text
  int64_t eos_inserted = 0;
  int64_t encoded_by_range = 0;  // see training_text.h
  std::map<std::string, int64_t> records_by_format;

  TextDataStats& operator+=(const TextDataStats& other);
};

// The format `path` is read with: .txt files are text; otherwise options.format, or the format of
// its first record when that is Auto. Throws ferry::Error when it cannot be told or does not fit.
DataFormat file_data_format(const std::filesystem::path& path, DataFormat configured);

// Reads the files in order. Throws ferry::Error for a malformed record (unless skip_malformed), an
// unreadable file, a token id outside the vocabulary, or data that yields no document at all.
std::vector<Document> load_text_documents(const std::vector<std::filesystem::path>& paths,
                                          const TextDataOptions& options, TextDataStats* stats = nullptr);

}  // namespace ferry
