// Python's str and float semantics on UTF-8 text, as Jinja templates observe them through Python.
//
// A template indexes, slices and measures strings by code point (len("é") == 1), strips Python's
// notion of whitespace (str.isspace, which includes U+00A0 and U+3000), and prints floats with
// repr() (1.0, 1e-05, 1e+16). These helpers give the same answers on UTF-8 std::strings. Text must
// be valid UTF-8; decoding anything else throws jinja::TemplateError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::jinja {

// Code points of UTF-8 text; throws TemplateError on invalid UTF-8.
std::u32string utf8_decode(std::string_view text);
void utf8_append(std::string& out, char32_t code_point);
std::string utf8_encode(std::u32string_view text);
bool is_ascii(std::string_view text);
// len(text) in Python: the number of code points.
int64_t py_len(std::string_view text);

// Python's str.isspace for one code point.
bool py_isspace(char32_t c);

// str.strip / lstrip / rstrip; `chars` = nullopt strips whitespace, otherwise any of its code points.
std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep = nullopt splits on runs of whitespace (and drops empty pieces).
// maxsplit < 0: no limit. Throws TemplateError for an empty separator, as Python raises ValueError.
std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// str.splitlines() without keepends.
std::vector<std::string> py_splitlines(std::string_view text);
// str.replace(old, new, count); count < 0 replaces all.
std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       int64_t count);

// Case mapping of ASCII text (upper, lower, title, capitalize, swapcase as Python does it).
// Throws TemplateError for text with non-ASCII letters: Unicode case tables are not implemented,
// and guessing would render something other than Python does.
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_title(std::string_view text);
std::string py_capitalize(std::string_view text);

// repr() of a str: single quotes unless the text holds ' and no ", Python's escapes.
std::string py_repr(std::string_view text);
// repr() / str() of a float: the shortest text that reads back to the same double, formatted as
// Python does (fixed notation for exponents in [-4, 16), else scientific with a 2-digit exponent).
std::string py_float_repr(double value);

// Python's str.__getitem__ with a slice, on code points; step != 0.
std::string py_slice(std::string_view text, std::optional<int64_t> start, std::optional<int64_t> stop,
                     std::optional<int64_t> step);
// The indices a slice selects from a sequence of `length` items (Python's slice.indices).
std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

}  // namespace ferry::jinja
