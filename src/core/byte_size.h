// Byte counts as people write and read them: "24GiB" in a config, "1.50 GiB" in a log line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

// "512 bytes", "3.00 KiB", "1.50 GiB".
std::string format_bytes(size_t bytes);

// "24GiB", "512 MiB", "1.5TB", "4G" or a plain number of bytes; binary units (KiB, K) are powers of
// 1024, decimal ones (KB) of 1000. Anything else, a size of zero or one past 2^63 bytes is a
// ferry::Error from `where` naming `key`.
int64_t parse_byte_size(const std::string& text, const std::string& key, const char* where = "config");

}  // namespace ferry
