// The tree-walking renderer behind jinja::Template (see jinja_template.h).
#include <fmt/format.h>

#include <unordered_map>

#include "core/error.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/parser.h"
#include "jinja/template.h"

namespace ferry::jinja {

namespace {

// Variables of one scope. Scopes chain to their parent; a `for` iteration and a macro call each get
// a new one, the template body has one, and the render context sits behind them all.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}

  Value* find(const std::string& name) {
    for (Scope* s = this; s; s = s->parent.get())
      for (auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

class Interpreter {
 public:
  Interpreter(const ParsedTemplate& tpl, const RenderInput& input) : tpl_(tpl) {
    for (size_t i = 0; i < input.tracked.size(); ++i)
      if (input.tracked[i]) tracked_.emplace(input.tracked[i], static_cast<int>(i));
    auto context = new_scope(nullptr);
    auto globals = new_scope(nullptr);
    for (auto& [k, v] : jinja_globals()) globals->set(k, v);
    context->parent = globals;
    for (const auto& [k, v] : input.variables) context->set(k, v);
    root_ = new_scope(context);
  }

  // A macro's function holds the scope it was defined in (its closure), and that scope, or one it
  // leads to, holds the macro: a cycle of shared_ptrs that outlives the render, with every
  // variable of the template in it. Emptying every scope of the render breaks each such cycle.
  ~Interpreter() {
    for (const std::weak_ptr<Scope>& weak : scopes_) {
      if (const std::shared_ptr<Scope> scope = weak.lock()) {
        scope->vars.clear();
        scope->parent.reset();
      }
    }
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  RenderResult run() {
    exec_body(tpl_.body, root_);
    return std::move(result_);
  }

 private:
  enum class Flow { Normal, Break, Continue };

  [[noreturn]] void located(int line, const std::string& what) const {
    fail("jinja", "{}:{}: {}", tpl_.name, line, what);
  }

  // ---- output ----
  void write(std::string_view text) {
    if (text.empty()) return;
    if (!captures_.empty()) {
      captures_.back()->append(text);
      return;
    }
    const size_t begin = result_.text.size();
    result_.text.append(text);
    if (current_tag_ < 0) return;
    auto& runs = result_.runs;
    if (!runs.empty() && runs.back().tracked_index == current_tag_ && runs.back().end == begin)
      runs.back().end = result_.text.size();
    else
      runs.push_back({begin, result_.text.size(), current_tag_});
  }

  void update_tag() {
    current_tag_ = -1;
    for (auto it = loop_tags_.rbegin(); it != loop_tags_.rend(); ++it) {
      if (*it >= 0) {
        current_tag_ = *it;
        return;
      }
    }
  }

  // ---- statements ----
  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
    for (const auto& s : body) {
      const Flow flow = exec(*s, scope);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    try {
      return exec_inner(s, scope);
    } catch (const TemplateError& e) {
      located(s.line, e.what());
    }
  }

  void assign(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      scope.set(targets[0], value);
      return;
    }
    if (value.is_undefined()) undefined_error(value);
    const std::vector<Value> items = iterate(value);
    if (items.size() < targets.size())
      throw TemplateError(
          fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), items.size()));
    if (items.size() > targets.size())
      throw TemplateError(fmt::format("too many values to unpack (expected {})", targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  Flow exec_inner(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    switch (s.kind) {
      case StmtKind::Output:
        for (const auto& e : s.output) {
          if (e->kind == ExprKind::Const && e->value.is_string())
            write(e->value.as_string());
          else
            write(eval(*e, *scope).to_str());
        }
        return Flow::Normal;
      case StmtKind::If:
        for (const auto& [test, body] : s.branches)
          if (eval(*test, *scope).truthy()) return exec_body(body, scope);
        return exec_body(s.else_body, scope);
      case StmtKind::For:
        return exec_for(s, scope);
      case StmtKind::Set: {
        Value value = eval(*s.expr, *scope);
        if (!s.ns_name.empty()) {
          Value* ns = scope->find(s.ns_name);
          if (!ns || ns->kind() != Kind::Namespace)
            throw TemplateError(
                fmt::format("cannot assign attribute on non-namespace object '{}'", s.ns_name));
          ns->dict_data().set(Value(s.ns_attr), std::move(value));
        } else {
          assign(*scope, s.targets, value);
        }
        return Flow::Normal;
      }
      case StmtKind::SetBlock: {
        std::string captured;
        captures_.push_back(&captured);
        try {
          exec_body(s.body, scope);
        } catch (...) {
          captures_.pop_back();
          throw;
        }
        captures_.pop_back();
        scope->set(s.targets[0], Value(std::move(captured)));
        return Flow::Normal;
      }
      case StmtKind::Macro: {
        const Stmt* macro = &s;
        std::shared_ptr<Scope> closure = scope;
        scope->set(s.name, Value::function("macro " + s.name, [this, macro, closure](CallArgs& args) {
                     return call_macro(*macro, closure, args);
                   }));
        return Flow::Normal;
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::Generation: {
        if (!captures_.empty())
          throw TemplateError("{% generation %} inside a {% set %} block or macro is not supported");
        const size_t begin = result_.text.size();
        const Flow flow = exec_body(s.body, scope);
        result_.generation_spans.emplace_back(begin, result_.text.size());
        return flow;
      }
    }
    return Flow::Normal;
  }

  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    const Value iterable = eval(*s.expr, *scope);
    if (iterable.is_none()) throw TemplateError("'NoneType' object is not iterable");
    std::vector<Value> items = iterate(iterable);
    if (s.filter) {
      // The loop's `if` sees the loop target but not `loop`.
      std::vector<Value> kept;
      for (const Value& item : items) {
        auto test_scope = new_scope(scope);
        assign(*test_scope, s.targets, item);
        if (eval(*s.filter, *test_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, new_scope(scope));
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      const Value& item = items[static_cast<size_t>(i)];
      auto iteration = new_scope(scope);
      assign(*iteration, s.targets, item);
      std::vector<Value> cycle_items;
      iteration->set(
          "loop",
          Value::object({
              {Value("index"), Value(i + 1)},
              {Value("index0"), Value(i)},
              {Value("revindex"), Value(n - i)},
              {Value("revindex0"), Value(n - i - 1)},
              {Value("first"), Value(i == 0)},
              {Value("last"), Value(i == n - 1)},
              {Value("length"), Value(n)},
              {Value("depth"), Value(1)},
              {Value("depth0"), Value(0)},
              {Value("previtem"),
               i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item")},
              {Value("nextitem"),
               i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item")},
              {Value("cycle"),
               Value::function("loop.cycle",
                               [i](CallArgs& args) {
                                 if (args.positional.empty())
                                   throw TemplateError("no items for cycling given");
                                 return args.positional[static_cast<size_t>(i) % args.positional.size()];
                               })},
              {Value("changed"), Value::function("loop.changed",
                                                 [](CallArgs&) -> Value {
                                                   throw TemplateError("loop.changed() is not supported");
                                                 })},
          }));
      const void* id = item.identity();
      auto hit = id ? tracked_.find(id) : tracked_.end();
      loop_tags_.push_back(hit == tracked_.end() ? -1 : hit->second);
      update_tag();
      Flow flow;
      try {
        flow = exec_body(s.body, iteration);
      } catch (...) {
        loop_tags_.pop_back();
        update_tag();
        throw;
      }
      loop_tags_.pop_back();
      update_tag();
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  std::shared_ptr<Scope> new_scope(std::shared_ptr<Scope> parent) {
    auto scope = std::make_shared<Scope>(std::move(parent));
    scopes_.push_back(scope);
    return scope;
  }

  Value call_macro(const Stmt& macro, const std::shared_ptr<Scope>& closure, CallArgs& args) {
    // Python stops runaway recursion at ~1000 frames; so does this, before the C++ stack would.
    if (macro_depth_ >= 500)
      throw TemplateError(fmt::format("maximum recursion depth exceeded in macro '{}'", macro.name));
    ++macro_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{macro_depth_};
    auto scope = new_scope(closure);
    if (args.positional.size() > macro.params.size())
      throw TemplateError(
          fmt::format("macro '{}' takes not more than {} argument(s)", macro.name, macro.params.size()));
    for (const auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& p : macro.params) known = known || p.first == key;
      if (!known)
        throw TemplateError(fmt::format("macro '{}' takes no keyword argument '{}'", macro.name, key));
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [param, fallback] = macro.params[i];
      std::optional<Value> value;
      if (i < args.positional.size()) value = args.positional[i];
      for (const auto& [key, v] : args.keyword) {
        if (key != param) continue;
        if (value)
          throw TemplateError(
              fmt::format("macro '{}' got multiple values for argument '{}'", macro.name, param));
        value = v;
      }
      if (!value) {
        value = fallback ? eval(*fallback, *scope)
                         : Value::undefined(fmt::format("parameter '{}' was not provided", param));
      }
      scope->set(param, *value);
    }
    std::string out;
    captures_.push_back(&out);
    const std::vector<int> saved_tags = std::move(loop_tags_);
    loop_tags_.clear();
    auto restore = [&] {
      captures_.pop_back();
      loop_tags_ = saved_tags;
      update_tag();
    };
    try {
      exec_body(macro.body, scope);
    } catch (...) {
      restore();
      throw;
    }
    restore();
    return Value(std::move(out));
  }

  // ---- expressions ----
  Value eval(const Expr& e, Scope& scope) {
    try {
      return eval_inner(e, scope);
    } catch (const TemplateError& err) {
      located(e.line, err.what());
    }
  }

  std::optional<int64_t> slice_part(const Expr* e, Scope& scope) {
    if (!e) return std::nullopt;
    const Value v = eval(*e, scope);
    if (v.is_none()) return std::nullopt;
    if (v.kind() != Kind::Int && !v.is_bool()) throw TemplateError("slice indices must be integers or None");
    return v.as_int();
  }

  CallArgs eval_args(const Expr& e, Scope& scope) {
    CallArgs args;
    for (const auto& a : e.items) args.positional.push_back(eval(*a, scope));
    for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a, scope));
    return args;
  }

  Value eval_inner(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case ExprKind::Const:
        return e.value;
      case ExprKind::Name: {
        if (Value* v = scope.find(e.name)) return *v;
        return Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2)
          items.emplace_back(eval(*e.items[i], scope), eval(*e.items[i + 1], scope));
        for (const auto& [k, v] : items)
          if (k.is_list() && !k.list_data().tuple) throw TemplateError("unhashable type: 'list'");
        return Value::dict(std::move(items));
      }
      case ExprKind::Getattr:
        return get_attribute(eval(*e.a, scope), e.name);
      case ExprKind::Getitem: {
        const Value object = eval(*e.a, scope);
        if (e.b->kind == ExprKind::Slice) {
          const auto start = slice_part(e.b->a.get(), scope);
          const auto stop = slice_part(e.b->b.get(), scope);
          const auto step = slice_part(e.b->c.get(), scope);
          return get_slice(object, start, stop, step);
        }
        return get_item(object, eval(*e.b, scope));
      }
      case ExprKind::Slice:
        throw TemplateError("a slice outside of a subscript");
      case ExprKind::Call: {
        const Value callee = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        return call_value(callee, args);
      }
      case ExprKind::Filter: {
        const Value subject = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        return apply_filter(e.name, subject, args);
      }
      case ExprKind::Test: {
        const Value subject = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        return Value(apply_test(e.name, subject, args));
      }
      case ExprKind::Not:
        return Value(!eval(*e.a, scope).truthy());
      case ExprKind::Neg:
        return negate(eval(*e.a, scope));
      case ExprKind::Pos: {
        Value v = eval(*e.a, scope);
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number())
          throw TemplateError(fmt::format("bad operand type for unary +: '{}'", v.type_name()));
        return v.is_bool() ? Value(v.as_int()) : v;
      }
      case ExprKind::Binary: {
        if (e.name == "and" || e.name == "or") {
          Value left = eval(*e.a, scope);
          if (left.truthy() == (e.name == "or")) return left;
          return eval(*e.b, scope);
        }
        const Value left = eval(*e.a, scope);
        const Value right = eval(*e.b, scope);
        return binary_operation(e.name, left, right);
      }
      case ExprKind::Compare: {
        Value left = eval(*e.a, scope);
        for (const auto& [op, operand] : e.compare_ops) {
          Value right = eval(*operand, scope);
          if (!compare(op, left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::Concat: {
        std::string out;
        for (const auto& item : e.items) out += eval(*item, scope).to_str();
        return Value(std::move(out));
      }
      case ExprKind::CondExpr: {
        if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined.",
            e.line));
      }
    }
    throw TemplateError("internal error: unknown expression");
  }

  const ParsedTemplate& tpl_;
  std::unordered_map<const void*, int> tracked_;
  std::vector<std::weak_ptr<Scope>> scopes_;  // every scope of the render, emptied at its end
  std::shared_ptr<Scope> root_;
  RenderResult result_;
  std::vector<std::string*> captures_;
  std::vector<int> loop_tags_;
  int current_tag_ = -1;
  int macro_depth_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source, std::string name) {
  Template t;
  t.parsed_ = std::make_shared<const ParsedTemplate>(parse_template(source, name));
  return t;
}

RenderResult Template::render(const RenderInput& input) const {
  FERRY_ASSERT(parsed_, "rendering an empty Template");
  return Interpreter(*parsed_, input).run();
}

const std::string& Template::name() const {
  static const std::string empty;
  return parsed_ ? parsed_->name : empty;
}

}  // namespace ferry::jinja
