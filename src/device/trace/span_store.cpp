#include "device/trace/span_store.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

namespace {

// An estimate of an unordered_map node of (string_view, id) with its bucket, and of a string's
// heap block beside its control block; the index is a small share of the store (its distinct
// strings are few against a step's spans, which repeat them layer after layer).
constexpr size_t kIndexEntryBytes = 64;
constexpr size_t kStringOverheadBytes = 48;
// A string longer than this is held cut to it (an op's operands run to a few hundred bytes), so
// that one span's new strings are bounded when the room for it is counted.
constexpr size_t kMaxStringBytes = 1024;
constexpr size_t kNewStringBytes = kMaxStringBytes + kStringOverheadBytes + kIndexEntryBytes;

}  // namespace

SpanStore SpanStore::of(const std::vector<TraceSpan>& spans) {
  SpanStore store;
  for (const TraceSpan& s : spans) store.add(s);
  return store;
}

uint32_t SpanStore::intern(std::string_view text) {
  text = text.substr(0, kMaxStringBytes);
  auto it = ids_.find(text);
  if (it != ids_.end()) return it->second;
  FERRY_ASSERT(strings_.size() < UINT32_MAX, "a trace of more than 4G distinct strings");
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.push_back(std::make_unique<const std::string>(text));
  string_bytes_ += strings_.back()->capacity() + kStringOverheadBytes + kIndexEntryBytes;
  ids_.emplace(*strings_.back(), id);
  return id;
}

void SpanStore::add(TraceTrack track, std::string_view name, std::string_view scope, double begin, double end,
                    int64_t bytes, std::string_view detail) {
  if (size_ == chunks_.size() * kChunkSpans) chunks_.push_back(std::make_unique<Chunk>());
  (*chunks_.back())[size_ % kChunkSpans] = {begin,          end,  bytes, intern(name), intern(scope),
                                            intern(detail), track};
  ++size_;
}

void SpanStore::set_times(size_t i, double begin, double end) {
  FERRY_ASSERT(i < size_);
  Held& h = (*chunks_[i / kChunkSpans])[i % kChunkSpans];
  h.begin = begin;
  h.end = end;
}

SpanView SpanStore::operator[](size_t i) const {
  FERRY_ASSERT(i < size_);
  const Held& h = (*chunks_[i / kChunkSpans])[i % kChunkSpans];
  return {h.track, *strings_[h.name], *strings_[h.scope], *strings_[h.detail], h.begin, h.end, h.bytes};
}

std::vector<TraceSpan> SpanStore::expanded() const {
  std::vector<TraceSpan> spans;
  spans.reserve(size_);
  for (size_t i = 0; i < size_; ++i) {
    const SpanView v = (*this)[i];
    spans.push_back(
        {v.track, std::string(v.name), std::string(v.scope), v.begin, v.end, v.bytes, std::string(v.detail)});
  }
  return spans;
}

size_t SpanStore::bytes_with(size_t more) const {
  const size_t chunks = (size_ + more + kChunkSpans - 1) / kChunkSpans;
  size_t bytes = std::max(chunks_.capacity(), chunks) * sizeof(std::unique_ptr<Chunk>) +
                 chunks * sizeof(Chunk) + strings_.capacity() * sizeof(std::unique_ptr<const std::string>) +
                 string_bytes_;
  if (more > 0) {
    // The spans added may bring new strings: three, as one span can, and the index's growth.
    bytes += 3 * kNewStringBytes;
    if (strings_.size() + 3 > strings_.capacity())
      bytes += std::max<size_t>(strings_.capacity(), 3) * sizeof(std::unique_ptr<const std::string>);
  }
  return bytes;
}

}  // namespace ferry
