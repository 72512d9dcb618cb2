#include "jinja/parser.h"

#include <initializer_list>
#include <set>

#include "core/error.h"
#include "jinja/lexer.h"

namespace ferry::jinja {

bool is_jinja_filter(const std::string& name) {
  static const std::set<std::string> names = {
      "abs",       "attr",       "batch",       "capitalize", "center",  "count",
      "d",         "default",    "dictsort",    "e",          "escape",  "filesizeformat",
      "first",     "float",      "forceescape", "format",     "groupby", "indent",
      "int",       "join",       "last",        "length",     "list",    "lower",
      "items",     "map",        "min",         "max",        "pprint",  "random",
      "reject",    "rejectattr", "replace",     "reverse",    "round",   "safe",
      "select",    "selectattr", "slice",       "sort",       "string",  "striptags",
      "sum",       "title",      "trim",        "truncate",   "unique",  "upper",
      "urlencode", "urlize",     "wordcount",   "wordwrap",   "xmlattr", "tojson"};
  return names.count(name) > 0;
}

bool is_jinja_test(const std::string& name) {
  static const std::set<std::string> names = {
      "odd",     "even",   "divisibleby", "defined",  "undefined", "filter", "test",    "none",
      "boolean", "false",  "true",        "integer",  "float",     "lower",  "upper",   "string",
      "mapping", "number", "sequence",    "iterable", "callable",  "sameas", "escaped", "in",
      "==",      "eq",     "equalto",     "!=",       "ne",        ">",      "gt",      "greaterthan",
      "ge",      ">=",     "<",           "lt",       "lessthan",  "<=",     "le"};
  return names.count(name) > 0;
}

namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : tokens_(std::move(tokens)), name_(name) {}

  Body parse_root() {
    Body body = subparse({});
    if (current().type != TokenType::End) fail_here("unexpected tag");
    return body;
  }

 private:
  // ---- token stream ----
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(const Token& t, const char* op) const { return t.type == TokenType::Operator && t.value == op; }
  bool is_name(const Token& t, const char* name) const {
    return t.type == TokenType::Name && t.value == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(current(), op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(current(), name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Data:
        return "template data";
      case TokenType::VariableBegin:
        return "'{{'";
      case TokenType::VariableEnd:
        return "end of print statement '}}'";
      case TokenType::BlockBegin:
        return "'{%'";
      case TokenType::BlockEnd:
        return "end of statement block '%}'";
      case TokenType::End:
        return "end of template";
      case TokenType::String:
        return "string";
      case TokenType::Integer:
        return "integer";
      case TokenType::Float:
        return "float";
      default:
        return "'" + t.value + "'";
    }
  }

  // Every level of nesting that the parser recurses into (parentheses, brackets, unary operators,
  // blocks inside blocks), and every link of a chain it builds in a loop (a.b.c, x|f|g, 1+2+3),
  // makes the syntax tree one level deeper, and the tree is evaluated and destroyed by recursion.
  // So both are counted, and a template past kMaxNesting is refused before the stack runs out
  // (10,000 nested parentheses would overflow it). jinja2 itself stops at Python's recursion
  // limit sooner (some 13 Python frames per parenthesis); chat templates nest a few levels.
  static constexpr int kMaxNesting = 256;

  // Counts levels of nesting while it lives.
  class Nesting {
   public:
    explicit Nesting(Parser& parser, int levels = 1) : parser_(parser) {
      for (int i = 0; i < levels; ++i) deeper();
    }
    ~Nesting() { parser_.nesting_ -= added_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    void deeper() {
      ++added_;
      if (++parser_.nesting_ > kMaxNesting)
        ferry::fail(
            "jinja",
            "{}:{}:{}: expressions and blocks nested deeper than {} levels, which ferry's Jinja parser "
            "does not read (jinja2 reaches Python's recursion limit sooner); simplify the template",
            parser_.name_, parser_.current().line, parser_.current().column, kMaxNesting);
    }

   private:
    Parser& parser_;
    int added_ = 0;
  };

  [[noreturn]] void fail_at(int line, const std::string& what) const {
    fail("jinja", "{}:{}: {}", name_, line, what);
  }
  [[noreturn]] void fail_here(const std::string& what) const {
    fail_at(current().line, what + ", got " + describe(current()));
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(std::string("expected '") + op + "'");
  }
  void expect(TokenType type, const char* what) {
    if (current().type != type) fail_here(std::string("expected ") + what);
    next();
  }
  std::string expect_name() {
    if (current().type != TokenType::Name) fail_here("expected a name");
    return next().value;
  }

  // ---- statements ----
  bool at_end_tag(const std::vector<std::string>& end_names) const {
    if (current().type != TokenType::Name) return false;
    for (const auto& n : end_names)
      if (current().value == n) return true;
    return false;
  }

  // Parses template content until a block tag named in `end_names` (left unconsumed, after its '{%').
  Body subparse(const std::vector<std::string>& end_names) {
    Body body;
    StmtPtr output;
    auto flush = [&] {
      if (output) body.push_back(std::move(output));
      output.reset();
    };
    auto add_output = [&](ExprPtr e, int line) {
      if (!output) output = std::make_unique<Stmt>(StmtKind::Output, line);
      output->output.push_back(std::move(e));
    };
    while (current().type != TokenType::End) {
      const Token& t = current();
      if (t.type == TokenType::Data) {
        auto e = std::make_unique<Expr>(ExprKind::Const, t.line);
        e->value = Value(t.value);
        add_output(std::move(e), t.line);
        next();
      } else if (t.type == TokenType::VariableBegin) {
        const int line = t.line;
        next();
        add_output(parse_tuple(false, true, {}, false), line);
        expect(TokenType::VariableEnd, "'}}'");
      } else if (t.type == TokenType::BlockBegin) {
        flush();
        next();
        if (!end_names.empty() && at_end_tag(end_names)) return body;
        body.push_back(parse_statement());
        expect(TokenType::BlockEnd, "'%}'");
      } else {
        fail_here("unexpected token");
      }
    }
    flush();
    return body;
  }

  Body parse_statements(const std::vector<std::string>& end_names, bool drop_needle) {
    skip_op(":");
    expect(TokenType::BlockEnd, "'%}'");
    const int line = current().line;
    Body body = subparse(end_names);
    if (current().type == TokenType::End) {
      std::string names;
      for (const auto& n : end_names) names += (names.empty() ? "'" : " or '") + n + "'";
      fail_at(line, "unexpected end of template; jinja was looking for " + names);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    const Nesting nesting(*this);
    const Token& t = current();
    if (t.type != TokenType::Name) fail_here("tag name expected");
    const std::string tag = t.value;
    const int line = t.line;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "break" || tag == "continue") {
      next();
      if (loop_depth_ == 0) fail_at(line, "'" + tag + "' outside of a loop");
      return std::make_unique<Stmt>(tag == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    if (tag == "generation") {
      next();
      auto s = std::make_unique<Stmt>(StmtKind::Generation, line);
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    static const std::set<std::string> unsupported = {"include", "import", "from",     "extends",    "block",
                                                      "call",    "filter", "with",     "autoescape", "do",
                                                      "trans",   "raw",    "pluralize"};
    if (unsupported.count(tag))
      fail_at(line, "the {% " + tag + " %} tag is not supported by ferry's Jinja interpreter");
    static const std::set<std::string> enders = {"endif", "endfor", "endset",       "endmacro",
                                                 "else",  "elif",   "endgeneration"};
    if (enders.count(tag)) fail_at(line, "unexpected '" + tag + "' (no block is open that it could close)");
    fail_at(line, "unknown tag '" + tag + "'");
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>(StmtKind::If, next().line);
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.value == "elif") continue;
      if (t.value == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>(StmtKind::For, next().line);
    s->targets = parse_assign_names({"in"});
    if (!skip_name("in")) fail_here("expected 'in'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name(current(), "recursive"))
      fail_here("recursive loops are not supported by ferry's Jinja interpreter");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().value == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  // Names for a `for` or `set` target: `x` or `a, b` (jinja's simplified tuple of primaries).
  std::vector<std::string> parse_assign_names(const std::vector<std::string>& end_names) {
    std::vector<std::string> names;
    const bool parenthesized = skip_op("(");
    while (true) {
      if (!names.empty() && !skip_op(",")) break;
      if (at_end_tag(end_names) || is_op(current(), ")") || is_op(current(), "=")) break;
      if (current().type != TokenType::Name) fail_here("can only assign to names here");
      names.push_back(next().value);
    }
    if (parenthesized) expect_op(")");
    if (names.empty()) fail_here("expected an assignment target");
    return names;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    if (current().type == TokenType::Name && is_op(look(), ".")) {
      auto s = std::make_unique<Stmt>(StmtKind::Set, line);
      s->ns_name = next().value;
      next();  // .
      s->ns_attr = expect_name();
      expect_op("=");
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    std::vector<std::string> names = parse_assign_names({});
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(StmtKind::Set, line);
      s->targets = std::move(names);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    if (names.size() != 1) fail_at(line, "a block {% set %} assigns to one name");
    if (is_op(current(), "|"))
      fail_at(line, "filters on a block {% set %} are not supported by ferry's Jinja interpreter");
    auto s = std::make_unique<Stmt>(StmtKind::SetBlock, line);
    s->targets = std::move(names);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>(StmtKind::Macro, next().line);
    s->name = expect_name();
    expect_op("(");
    bool defaults = false;
    while (!is_op(current(), ")")) {
      if (!s->params.empty()) expect_op(",");
      std::string param = expect_name();
      ExprPtr def;
      if (skip_op("=")) {
        def = parse_expression(true);
        defaults = true;
      } else if (defaults) {
        fail_here("non-default argument follows default argument");
      }
      s->params.emplace_back(std::move(param), std::move(def));
    }
    expect_op(")");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    return s;
  }

  // ---- expressions ----
  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& t = current();
    if (t.type == TokenType::VariableEnd || t.type == TokenType::BlockEnd || is_op(t, ")")) return true;
    return at_end_tag(extra_end);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parentheses) {
    const int line = current().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(current(), ","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail_here("expected an expression");
    }
    auto e = std::make_unique<Expr>(ExprKind::Tuple, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    Nesting nesting(*this, 0);
    int line = current().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      nesting.deeper();
      auto e = std::make_unique<Expr>(ExprKind::CondExpr, line);
      e->a = std::move(expr2);
      e->b = std::move(expr1);
      e->c = std::move(expr3);
      expr1 = std::move(e);
      line = current().line;
    }
    return expr1;
  }

  ExprPtr binary(const char* op, ExprPtr left, ExprPtr right, int line) {
    auto e = std::make_unique<Expr>(ExprKind::Binary, line);
    e->name = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  ExprPtr parse_or() {
    const int line = current().line;
    Nesting nesting(*this, 0);
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      nesting.deeper();
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    const int line = current().line;
    Nesting nesting(*this, 0);
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      nesting.deeper();
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name(current(), "not")) {
      const Nesting nesting(*this);
      const int line = next().line;
      auto e = std::make_unique<Expr>(ExprKind::Not, line);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = current().line;
    ExprPtr expr = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      const Token& t = current();
      static const std::vector<std::pair<const char*, const char*>> kOps = {
          {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "lteq"}, {">", "gt"}, {">=", "gteq"}};
      const char* op = nullptr;
      if (t.type == TokenType::Operator)
        for (const auto& [text, name] : kOps)
          if (t.value == text) op = name;
      if (op) {
        next();
        ops.emplace_back(op, parse_math1());
      } else if (skip_name("in")) {
        ops.emplace_back("in", parse_math1());
      } else if (is_name(t, "not") && is_name(look(), "in")) {
        next();
        next();
        ops.emplace_back("notin", parse_math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return expr;
    auto e = std::make_unique<Expr>(ExprKind::Compare, line);
    e->a = std::move(expr);
    e->compare_ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    const int line = current().line;
    Nesting nesting(*this, 0);
    ExprPtr left = parse_concat();
    while (is_op(current(), "+") || is_op(current(), "-")) {
      nesting.deeper();
      const std::string op = next().value;
      left = binary(op == "+" ? "+" : "-", std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = current().line;
    std::vector<ExprPtr> args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto e = std::make_unique<Expr>(ExprKind::Concat, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_math2() {
    const int line = current().line;
    Nesting nesting(*this, 0);
    ExprPtr left = parse_pow();
    while (true) {
      const char* op = nullptr;
      for (const char* o : {"*", "/", "//", "%"})
        if (is_op(current(), o)) op = o;
      if (!op) break;
      nesting.deeper();
      next();
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const int line = current().line;
    Nesting nesting(*this, 0);
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      nesting.deeper();
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nesting nesting(*this);
    const int line = current().line;
    ExprPtr node;
    if (skip_op("-")) {
      node = std::make_unique<Expr>(ExprKind::Neg, line);
      node->a = parse_unary(false);
    } else if (skip_op("+")) {
      node = std::make_unique<Expr>(ExprKind::Pos, line);
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = current();
    const int line = t.line;
    if (t.type == TokenType::Name) {
      auto e = std::make_unique<Expr>(ExprKind::Const, line);
      if (t.value == "true" || t.value == "True") {
        e->value = Value(true);
      } else if (t.value == "false" || t.value == "False") {
        e->value = Value(false);
      } else if (t.value == "none" || t.value == "None") {
        e->value = Value::none();
      } else {
        e = std::make_unique<Expr>(ExprKind::Name, line);
        e->name = t.value;
      }
      next();
      return e;
    }
    if (t.type == TokenType::String) {
      std::string text;
      while (current().type == TokenType::String) text += next().value;  // adjacent literals join
      auto e = std::make_unique<Expr>(ExprKind::Const, line);
      e->value = Value(std::move(text));
      return e;
    }
    if (t.type == TokenType::Integer || t.type == TokenType::Float) {
      auto e = std::make_unique<Expr>(ExprKind::Const, line);
      e->value = t.type == TokenType::Integer ? Value(t.int_value) : Value(t.float_value);
      next();
      return e;
    }
    if (is_op(t, "(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op(t, "[")) {
      next();
      auto e = std::make_unique<Expr>(ExprKind::List, line);
      while (!is_op(current(), "]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op(current(), "]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op(t, "{")) {
      next();
      auto e = std::make_unique<Expr>(ExprKind::Dict, line);
      while (!is_op(current(), "}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op(current(), "}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail_here("unexpected token in an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    Nesting nesting(*this, 0);
    while (true) {
      if (is_op(current(), ".") || is_op(current(), "[") || is_op(current(), "(")) nesting.deeper();
      if (is_op(current(), ".") || is_op(current(), "[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    Nesting nesting(*this, 0);
    while (true) {
      if (is_op(current(), "|") || is_name(current(), "is") || is_op(current(), "(")) nesting.deeper();
      if (is_op(current(), "|")) {
        node = parse_filter(std::move(node));
      } else if (is_name(current(), "is")) {
        node = parse_test(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    const int line = t.line;
    if (t.value == ".") {
      const Token& attr = next();
      if (attr.type == TokenType::Name) {
        auto e = std::make_unique<Expr>(ExprKind::Getattr, line);
        e->a = std::move(node);
        e->name = attr.value;
        return e;
      }
      if (attr.type != TokenType::Integer) fail_at(attr.line, "expected a name or number after '.'");
      auto index = std::make_unique<Expr>(ExprKind::Const, line);
      index->value = Value(attr.int_value);
      auto e = std::make_unique<Expr>(ExprKind::Getitem, line);
      e->a = std::move(node);
      e->b = std::move(index);
      return e;
    }
    // '['
    std::vector<ExprPtr> args;
    while (!is_op(current(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = std::make_unique<Expr>(ExprKind::Getitem, line);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      auto tuple = std::make_unique<Expr>(ExprKind::Tuple, line);
      tuple->items = std::move(args);
      e->b = std::move(tuple);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const int line = current().line;
    ExprPtr start;
    if (!skip_op(":")) {
      ExprPtr node = parse_expression(true);
      if (!skip_op(":")) return node;
      start = std::move(node);
    }
    auto slice = std::make_unique<Expr>(ExprKind::Slice, line);
    slice->a = std::move(start);
    if (!is_op(current(), ":") && !is_op(current(), "]") && !is_op(current(), ","))
      slice->b = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op(current(), "]") && !is_op(current(), ",")) slice->c = parse_expression(true);
    }
    return slice;
  }

  // Fills e->items (positional) and e->kwargs from "(...)".
  void parse_call_args(Expr* e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(current(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(current(), ")")) break;
      }
      if (is_op(current(), "*") || is_op(current(), "**"))
        fail_here("*args and **kwargs in calls are not supported by ferry's Jinja interpreter");
      if (current().type == TokenType::Name && is_op(look(), "=")) {
        std::string key = next().value;
        next();
        e->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail_here("positional argument after a keyword argument");
        e->items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = std::make_unique<Expr>(ExprKind::Call, current().line);
    e->a = std::move(node);
    parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_filter(ExprPtr node) {
    Nesting nesting(*this, 0);
    while (skip_op("|")) {
      nesting.deeper();
      const int line = current().line;
      std::string name = expect_name();
      while (skip_op(".")) name.append(".").append(expect_name());
      if (!is_jinja_filter(name)) fail_at(line, "no filter named '" + name + "'");
      auto e = std::make_unique<Expr>(ExprKind::Filter, line);
      e->a = std::move(node);
      e->name = name;
      if (is_op(current(), "(")) parse_call_args(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    if (!is_jinja_test(name)) fail_at(line, "no test named '" + name + "'");
    auto e = std::make_unique<Expr>(ExprKind::Test, line);
    e->a = std::move(node);
    e->name = name;
    const Token& t = current();
    if (is_op(t, "(")) {
      parse_call_args(e.get());
    } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Integer ||
                t.type == TokenType::Float || is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
      if (is_name(t, "is")) fail_here("you cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = std::make_unique<Expr>(ExprKind::Not, line);
    n->a = std::move(e);
    return n;
  }

  std::vector<Token> tokens_;
  const std::string& name_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;  // see Nesting
};

}  // namespace

ParsedTemplate parse_template(std::string_view source, const std::string& name) {
  ParsedTemplate t;
  t.name = name;
  Parser parser(tokenize_template(source, name), t.name);
  t.body = parser.parse_root();
  return t;
}

}  // namespace ferry::jinja
