#include "device/trace/trace_scope.h"

#include "device/trace/tracer.h"

namespace ferry {

namespace {

std::string join(std::string_view what, std::string_view detail) {
  std::string name(what);
  if (!detail.empty()) {
    name += ' ';
    name += detail;
  }
  return name;
}

}  // namespace

TraceScope::TraceScope(Device& device, std::string_view what, std::string_view detail) {
  Tracer* tracer = device.tracer();
  if (tracer == nullptr || !tracer->recording()) return;
  std::string name = join(what, detail);
  span_ = tracer->open_host_span(TraceTrack::Host, name);
  tracer->push_scope(std::move(name));
  tracer_ = tracer;
}

TraceScope::~TraceScope() {
  if (tracer_ == nullptr) return;
  tracer_->pop_scope();
  tracer_->close_host_span(span_);
}

HostSpan::HostSpan(Device& device, TraceTrack track, std::string_view what, std::string_view detail) {
  tracer_ = device.tracer();
  if (tracer_ != nullptr) span_ = tracer_->open_host_span(track, join(what, detail));
}

HostSpan::~HostSpan() {
  if (tracer_ != nullptr) tracer_->close_host_span(span_);
}

}  // namespace ferry
