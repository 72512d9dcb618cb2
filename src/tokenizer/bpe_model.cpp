#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_util.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

// Open-addressing hash map (id_a, id_b) → (rank, merged id); built once, read-only afterwards.
struct BpeModel::MergeMap {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<Slot> slots;
  int shift = 64;

  explicit MergeMap(size_t count) {
    size_t size = 16;
    int bits = 4;
    while (size < count * 2) {
      size *= 2;
      ++bits;
    }
    slots.resize(size);
    shift = 64 - bits;
  }
  static uint64_t key_of(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t home(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift); }
  // A later duplicate of a merge replaces the earlier one, as in HF's HashMap collect.
  void put(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t key = key_of(a, b);
    const size_t mask = slots.size() - 1;
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == key) {
        slots[i] = {key, rank, id};
        return;
      }
    }
  }
  const Slot* get(int32_t a, int32_t b) const {
    const uint64_t key = key_of(a, b);
    const size_t mask = slots.size() - 1;
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

namespace {

std::atomic<uint64_t> g_next_cache_key{1};

// The words one thread has tokenized, for up to four models at a time.
struct WordCache {
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxWordBytes = 256;
  uint64_t key = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
};

WordCache& thread_cache(uint64_t key) {
  thread_local std::array<WordCache, 4> caches;
  thread_local size_t next_victim = 0;
  for (auto& c : caches)
    if (c.key == key) return c;
  WordCache& c = caches[next_victim];
  next_victim = (next_victim + 1) % caches.size();
  c.key = key;
  c.words.clear();
  return c;
}

std::optional<std::string> optional_string(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail("tokenizer", "\"{}\" of the BPE model in tokenizer.json is not a string", key);
  return it->get<std::string>();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& config) : cache_key_(g_next_cache_key.fetch_add(1)) {
  const std::string type = config.value("type", std::string("BPE"));
  if (type != "BPE")
    fail("tokenizer",
         "model type '{}' is not supported by ferry (only BPE: Llama, Mistral, Qwen, GPT-2 families)", type);
  if (config.contains("dropout") && !config["dropout"].is_null() && config["dropout"].get<double>() > 0.0)
    fail("tokenizer", "BPE dropout {} is set; ferry tokenizes deterministically, set \"dropout\" to null",
         config["dropout"].dump());

  const auto& vocab = json_field(config, "vocab", "BPE model");
  if (!vocab.is_object()) fail("tokenizer", "\"vocab\" of the BPE model in tokenizer.json is not an object");
  vocab_.reserve(vocab.size());
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      fail("tokenizer", "vocab entry \"{}\" has a non-integer id", it.key());
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      fail("tokenizer", "vocab entry \"{}\" has id {} out of range", it.key(), id);
    vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  has_token_.resize(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_token_[id] = true;
  }

  if (auto unk = optional_string(config, "unk_token")) {
    const auto it = vocab_.find(*unk);
    if (it == vocab_.end()) fail("tokenizer", "unk_token \"{}\" of the BPE model is not in its vocab", *unk);
    unk_id_ = it->second;
  }
  continuing_subword_prefix_ = optional_string(config, "continuing_subword_prefix").value_or("");
  end_of_word_suffix_ = optional_string(config, "end_of_word_suffix").value_or("");
  fuse_unk_ = config.value("fuse_unk", false);
  byte_fallback_ = config.value("byte_fallback", false);
  ignore_merges_ = config.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    for (const std::string marker : {"\xE2\x96\x81", " "}) {
      if (!vocab_.count(marker)) continue;
      bool safe = true;
      for (const auto& [token, id] : vocab_) {
        for (size_t at = token.find(marker, 1); safe && at != std::string::npos;
             at = token.find(marker, at + 1)) {
          safe = at >= marker.size() && token.compare(at - marker.size(), marker.size(), marker) == 0;
        }
        if (!safe) break;
      }
      if (safe) {
        split_marker_ = marker;
        break;
      }
    }
  }

  const auto& merges = json_array(config, "merges", "BPE model");
  merges_ = std::make_unique<MergeMap>(merges.size());
  const size_t prefix_len = continuing_subword_prefix_.size();
  std::string a, b, merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos)
        fail("tokenizer", "merge {} \"{}\" is not two tokens separated by a space", rank, s);
      a.assign(s, 0, space);
      b.assign(s, space + 1, std::string::npos);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("tokenizer", "merge {} is {}; expected \"a b\" or [\"a\", \"b\"]", rank, m.dump());
    }
    merged = a;
    merged.append(b, std::min(prefix_len, b.size()), std::string::npos);
    const auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(merged);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
      fail("tokenizer", "merge {} (\"{}\" \"{}\") uses a token that is not in the vocab", rank, a, b);
    merges_->put(ia->second, ib->second, static_cast<int32_t>(rank), im->second);
  }
}

BpeModel::~BpeModel() = default;  // here, where MergeMap is complete

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  constexpr size_t kSplitAbove = 64;  // shorter words go to the cache whole
  if (split_marker_.empty() || word.size() <= kSplitAbove) {
    tokenize_cached(word, ids);
    return;
  }
  // Cut before each run of markers (see split_marker_).
  const std::string_view marker = split_marker_;
  size_t start = 0;
  for (size_t at = word.find(marker, 1); at != std::string_view::npos;
       at = word.find(marker, at + marker.size())) {
    if (at >= marker.size() && word.compare(at - marker.size(), marker.size(), marker) == 0) continue;
    tokenize_cached(word.substr(start, at - start), ids);
    start = at;
  }
  tokenize_cached(word.substr(start), ids);
}

void BpeModel::tokenize_cached(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.size() > WordCache::kMaxWordBytes) {
    merge_word(word, ids);
    return;
  }
  WordCache& cache = thread_cache(cache_key_);
  const auto hit = cache.words.find(word);
  if (hit != cache.words.end()) {
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t first = ids.size();
  merge_word(word, ids);
  if (cache.words.size() >= WordCache::kMaxEntries) cache.words.clear();
  cache.words.emplace(std::string(word), std::vector<int32_t>(ids.begin() + first, ids.end()));
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  merge_word(word, ids);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, true});
  };

  // 1. Characters → initial symbols (HF's BPE::merge_word).
  int32_t pending_unk = -1;  // an unk token not yet added (fuse_unk grows it)
  std::string s;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    i += utf8_length(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    const std::string_view ch = word.substr(start, i - start);
    const bool first = start == 0, last = i == word.size();
    std::string_view key = ch;
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      s.clear();
      if (!first) s += continuing_subword_prefix_;
      s += ch;
      if (last) s += end_of_word_suffix_;
      key = s;
    }
    const auto it = vocab_.find(key);
    if (it != vocab_.end()) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : key) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (const char c : key) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  // 2. Merges: lowest rank first, then leftmost (HF's Word::merge_all).
  struct Candidate {
    int32_t rank, pos, id;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Candidate> queue;  // a binary max-heap under Candidate::operator<
  queue.clear();
  auto push = [&](const Candidate& c) {
    queue.push_back(c);
    std::push_heap(queue.begin(), queue.end());
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const auto* m = merges_->get(symbols[k].id, symbols[k + 1].id))
      push({m->rank, static_cast<int32_t>(k), m->id});
  }
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Candidate top = queue.back();
    queue.pop_back();
    Symbol& cur = symbols[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    const auto* m = merges_->get(cur.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // stale entry
    cur.id = top.id;
    cur.next = right.next;
    symbols[next_pos].alive = false;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const auto* pm = merges_->get(symbols[cur.prev].id, cur.id)) push({pm->rank, cur.prev, pm->id});
    }
    if (cur.next >= 0) {
      if (const auto* nm = merges_->get(cur.id, symbols[cur.next].id)) push({nm->rank, top.pos, nm->id});
    }
  }
  for (const auto& sym : symbols)
    if (sym.alive) ids.push_back(sym.id);
}

}  // namespace ferry::tok
