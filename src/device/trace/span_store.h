// The spans a trace holds (device/trace/tracer.h), compact: each is 40 bytes, its name, scope and
// operands stored once per distinct string. A step's spans (3,259 for an 8B at micro-batch 16) nearly
// all repeat a name, scope and operand list another span has; as TraceSpan, three strings each,
// they took ~180 bytes a span, and the JSON document once built from them ~1 KB an event, none of it
// counted by the host plan. The store says how much it holds, so that the trace keeps within what
// the plan gives it (`trace_memory`).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "device/trace/trace_span.h"

namespace ferry {

// One held span as the store lends it out: the strings point into the store.
struct SpanView {
  TraceTrack track = TraceTrack::Host;
  std::string_view name, scope, detail;
  double begin = 0.0, end = 0.0;
  int64_t bytes = -1;
};

class SpanStore {
 public:
  SpanStore() = default;
  SpanStore(const SpanStore&) = delete;
  SpanStore& operator=(const SpanStore&) = delete;
  SpanStore(SpanStore&&) = default;
  SpanStore& operator=(SpanStore&&) = default;

  // The store of `spans`, in order.
  static SpanStore of(const std::vector<TraceSpan>& spans);

  void add(TraceTrack track, std::string_view name, std::string_view scope, double begin, double end,
           int64_t bytes, std::string_view detail);
  void add(const TraceSpan& span) {
    add(span.track, span.name, span.scope, span.begin, span.end, span.bytes, span.detail);
  }

  // The times of span i, for a span added before they were known.
  void set_times(size_t i, double begin, double end);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  SpanView operator[](size_t i) const;
  std::vector<TraceSpan> expanded() const;

  // Host memory the store holds: its chunks of spans and its strings with their index.
  size_t bytes() const { return bytes_with(0); }
  // The most it holds with `more` spans added: their chunks, and as many new strings as one span
  // brings at most (a step's spans repeat the strings held but for a few).
  size_t bytes_with(size_t more) const;

 private:
  struct Held {
    double begin, end;
    int64_t bytes;
    uint32_t name, scope, detail;
    TraceTrack track;
  };
  static constexpr size_t kChunkSpans = 4096;  // 160 KiB: the store grows without copying
  using Chunk = std::array<Held, kChunkSpans>;

  uint32_t intern(std::string_view text);

  std::vector<std::unique_ptr<Chunk>> chunks_;
  size_t size_ = 0;
  std::vector<std::unique_ptr<const std::string>> strings_;  // id -> text; stable addresses
  std::unordered_map<std::string_view, uint32_t> ids_;       // views into strings_
  size_t string_bytes_ = 0;
};

}  // namespace ferry
