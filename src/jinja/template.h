// A compiled Jinja template and its renderer: a tree-walking interpreter over jinja_parser's
// syntax tree with jinja2's scoping (a `for` body is a fresh scope each iteration; `if` is not a
// scope; `set` inside a loop does not leak out; namespace() carries state across iterations),
// loop variables (loop.index, index0, revindex, revindex0, first, last, length, previtem,
// nextitem, cycle), loop controls and macros.
//
// Beyond the text, rendering reports where output came from, which is what assistant-token masks
// need: `tracked` lists objects (by identity, e.g. the message dicts of a conversation); output
// written while the current item of an enclosing `for` loop is tracked object k is attributed to k
// (the innermost such loop wins). {% generation %} blocks (transformers' AssistantTracker) are
// reported as byte ranges too.
//
// A Template is immutable once parsed; render() may run on several threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace ferry::jinja {

struct ParsedTemplate;

struct RenderInput {
  std::vector<std::pair<std::string, Value>> variables;  // the render context (name → value)
  std::vector<const void*> tracked;                      // Value::identity() of tracked objects
};

struct AttributedRun {
  size_t begin = 0, end = 0;  // byte range of the output
  int tracked_index = 0;      // index into RenderInput::tracked
};

struct RenderResult {
  std::string text;
  std::vector<AttributedRun> runs;                          // in output order, maximal
  std::vector<std::pair<size_t, size_t>> generation_spans;  // byte ranges of {% generation %} output
};

class Template {
 public:
  // Parses `source`; `name` appears in errors ("[jinja] NAME:LINE: ..."). Throws ferry::Error for a
  // syntax error or an unsupported construct.
  static Template parse(std::string_view source, std::string name);

  // Throws ferry::Error ("[jinja] NAME:LINE: what") when the template fails at run time, e.g. an
  // undefined value used, raise_exception() called, or a feature ferry does not implement.
  RenderResult render(const RenderInput& input) const;

  const std::string& name() const;

 private:
  std::shared_ptr<const ParsedTemplate> parsed_;
};

}  // namespace ferry::jinja
