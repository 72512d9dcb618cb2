// SHA-256 (FIPS 180-4), for fingerprints of training data: the token cache is keyed by the hash of
// the tokenizer, the template, the data files and the options that shaped the tokens.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ferry {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // The digest as 64 lowercase hex digits; the object is then spent.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

std::string sha256_hex(std::string_view data);
// Hashes a file in chunks. Throws ferry::Error when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace ferry
