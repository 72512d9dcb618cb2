// A whole file read into a string: configs, tokenizer files, indexes, templates.
#pragma once

#include <filesystem>
#include <string>

namespace ferry {

// The bytes of `path`. A file that cannot be opened or read is a ferry::Error from `where` that
// names the path, the system's reason and `hint` (what the user should do).
std::string read_text_file(const std::filesystem::path& path, const char* where,
                           const char* hint = "check the path and its permissions");

}  // namespace ferry
