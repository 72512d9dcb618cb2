// A deterministic mutator for fuzzing parsers from valid seeds (in the manner of libFuzzer's and
// AFL's havoc stage): each input is a seed, or a splice of two, changed by one to four of bit
// flips, byte sets, insertions of bytes or of tokens that parsers treat specially, deletions,
// duplications and truncations. For JSON seeds, one input in two is instead a structural edit of
// the parsed seed (a value replaced by one of another type or an extreme one, a key removed, a
// container nested deeper), which reaches the checks after parsing that byte noise rarely gets
// past the parser to. The same seed list and rng seed give the same inputs, run after run.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ferry::faults {

class Mutator {
 public:
  // `tokens`: strings worth inserting for this input language (JSON or YAML punctuation, Jinja
  // tags); `json`: whether the seeds are JSON documents that structural edits may apply to.
  Mutator(std::vector<std::string> seeds, std::vector<std::string> tokens, bool json, uint64_t rng_seed);

  std::string next();

 private:
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }
  void mutate_bytes(std::string& s);
  bool mutate_json(std::string& s);

  std::vector<std::string> seeds_;
  std::vector<std::string> tokens_;
  bool json_;
  std::mt19937_64 rng_;
};

// Tokens that JSON parsers, YAML parsers and the Jinja lexer/parser treat specially.
std::vector<std::string> json_tokens();
std::vector<std::string> yaml_tokens();
std::vector<std::string> jinja_tokens();

}  // namespace ferry::faults
