// ferry's tokenizer throughput: encode_batch over a JSONL corpus of documents (one JSON string a
// line, as bench/tokenizer_bench.mjs writes it), best of 3 after a warm-up, on a pool of --threads
// threads. Prints one JSON line: {"mb_per_s", "seconds", "tokens", "checksum"}; the checksum
// (FNV-1a of all ids in order) equals the Node oracle's when the ids are the same.
//
//   tokenizer_bench TOKENIZER_DIR CORPUS.jsonl [THREADS]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.jsonl [THREADS]\n", argv[0]);
    return 2;
  }
  const size_t threads = argc > 3 ? std::stoul(argv[3]) : 0;
  ferry::ThreadPool::set_global_threads(threads);
  try {
    const ferry::Tokenizer tokenizer = ferry::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    if (!in) ferry::fail("tokenizer_bench", "cannot open {}", argv[2]);
    std::vector<std::string> docs;
    size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      docs.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += docs.back().size();
    }
    auto result = tokenizer.encode_batch(docs, false);  // warm-up (also starts the pool)
    double best = 1e30;
    for (int k = 0; k < 3; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      result = tokenizer.encode_batch(docs, false);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    uint32_t h = 0x811c9dc5u;
    size_t tokens = 0;
    for (const auto& ids : result) {
      for (const int32_t id : ids) {
        h = (h ^ static_cast<uint32_t>(id)) * 16777619u;
        ++tokens;
      }
    }
    std::printf(
        "{\"mb_per_s\": %.3f, \"seconds\": %.4f, \"tokens\": %zu, \"checksum\": %u, \"threads\": %zu}\n",
        bytes / 1e6 / best, best, tokens, h, ferry::ThreadPool::global().size());
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
