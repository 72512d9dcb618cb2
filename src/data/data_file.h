// The bytes of a data file, whether it is stored as it is or gzip-compressed (`.gz`, as datasets
// are often shipped: train.jsonl.gz). A compressed file is read as the file it decompresses to;
// its format is told by the name without `.gz` (notes.txt.gz is plain text).
#pragma once

#include <filesystem>
#include <string>

namespace ferry {

// True for a name ending in .gz.
bool is_gzip_path(const std::filesystem::path& path);

// The extension that says the data's format: ".jsonl" for both a.jsonl and a.jsonl.gz.
std::string data_extension(const std::filesystem::path& path);

// The whole (decompressed) content. Throws ferry::Error naming the file for a directory, an
// unreadable file or a damaged gzip stream.
std::string read_data_file(const std::filesystem::path& path);

}  // namespace ferry
