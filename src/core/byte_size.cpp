#include "core/byte_size.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <map>

#include "core/error.h"

namespace ferry {

std::string format_bytes(size_t bytes) {
  constexpr double kKiB = 1024.0;
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  if (b < kKiB * kKiB) return fmt::format("{:.2f} KiB", b / kKiB);
  if (b < kKiB * kKiB * kKiB) return fmt::format("{:.2f} MiB", b / (kKiB * kKiB));
  return fmt::format("{:.2f} GiB", b / (kKiB * kKiB * kKiB));
}

int64_t parse_byte_size(const std::string& text, const std::string& key, const char* where) {
  const auto bad = [&] {
    fail(where, "'{}' must be a size such as 24GiB, 512MiB or 1.5TB, got '{}'", key, text);
  };
  // The number: digits with at most one '.', nothing else (so "1.5.5GiB" or "1e3GiB" is refused
  // rather than read as a prefix of it).
  size_t i = 0, digits = 0, dots = 0;
  for (; i < text.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++digits;
    } else if (text[i] == '.') {
      ++dots;
    } else {
      break;
    }
  }
  if (digits == 0 || dots > 1) bad();
  double number = 0;
  if (std::from_chars(text.data(), text.data() + i, number).ptr != text.data() + i) bad();
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  static const std::map<std::string, double> units = {
      {"", 1},       {"B", 1},         {"KB", 1e3},         {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12},  {"KiB", 1024.0},  {"MiB", 1048576.0},  {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0},
  };
  auto u = units.find(unit);
  FERRY_CHECK(u != units.end(), where,
              "'{}': unknown size unit '{}' in '{}'; use B, KiB, MiB, GiB, TiB (or KB, MB, GB)", key, unit,
              text);
  const double bytes = number * u->second;
  FERRY_CHECK(bytes < 0x1p63, where, "'{}' is {}, more bytes than any machine has; give a size such as 24GiB",
              key, text);
  FERRY_CHECK(
      bytes >= 1, where,
      "'{}' is {}, which is no size to work with; give a positive size such as 24GiB, or leave '{}' out for "
      "the default",
      key, text, key);
  return static_cast<int64_t>(bytes);
}

}  // namespace ferry
