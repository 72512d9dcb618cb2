// The syntax tree of a Jinja template, as jinja2's parser builds it (jinja2/nodes.py, reduced to
// what chat templates use). Every node carries the template line it starts on, for errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace ferry::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Const,     // value
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // items (key, value pairs, flattened: k0, v0, k1, v1, ...)
  Getattr,   // object, name
  Getitem,   // object, index (an expression or a Slice)
  Slice,     // start, stop, step (each may be null)
  Call,      // callee, args, kwargs
  Filter,    // object (the filtered value), name, args, kwargs
  Test,      // object, name, args, kwargs
  Not,       // operand
  Neg,       // operand
  Pos,       // operand
  Binary,    // op ("+", "-", "*", "/", "//", "%", "**", "and", "or"), left, right
  Compare,   // left, ops (op, operand): "eq" "ne" "lt" "lteq" "gt" "gteq" "in" "notin"
  Concat,    // items (the ~ operator)
  CondExpr,  // test, then, otherwise (may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                 // Const
  std::string name;            // Name, Getattr, Filter, Test; Binary: the operator
  ExprPtr a, b, c;             // operands (see ExprKind)
  std::vector<ExprPtr> items;  // List, Tuple, Dict, Concat; Call/Filter/Test: positional args
  std::vector<std::pair<std::string, ExprPtr>> kwargs;       // Call, Filter, Test
  std::vector<std::pair<std::string, ExprPtr>> compare_ops;  // Compare

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

enum class StmtKind {
  Output,    // items: data (Const) and {{ }} expressions
  If,        // branches: (test, body)...; else_body
  For,       // targets, iter, filter, body, else_body
  Set,       // targets (names) or a namespace attribute (ns_name, attr), expr
  SetBlock,  // targets[0], filters (applied to the captured text), body
  Macro,     // name, params (name, default or null), body
  Break,
  Continue,
  Generation,  // transformers' {% generation %}: body; records the span of what it renders
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::vector<ExprPtr> output;                          // Output
  std::vector<std::pair<ExprPtr, Body>> branches;       // If
  Body body, else_body;                                 // For, If (else), SetBlock, Macro, Generation
  std::vector<std::string> targets;                     // For, Set, SetBlock
  std::string ns_name, ns_attr;                         // Set of a namespace attribute
  ExprPtr expr;                                         // For: iterable; Set: value
  ExprPtr filter;                                       // For: the `if` condition; SetBlock: filter chain
  std::string name;                                     // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

}  // namespace ferry::jinja
